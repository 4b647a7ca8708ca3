"""``kairos bench projection``: what the warm start, training and benchmark would cost on a GPU for a large model and
long chains — **a projection on paper**, computed from the exponents ``kairos bench scaling`` measured, never a
measurement.

The scaling bench measures generated tokens per question against chain length on the micro-world (its LM writes
≈ 9–12 tokens a step). Each cost's tokens are fitted as ``a·n^b`` (:func:`eval.perf.scaling_report.fit_power_law`
over the merged points of every ``--scaling`` JSON, so a rerun of one cost to a longer chain joins the first run's
points). The projection evaluates each fit at ``--steps``, scales it by ``--tokens-per-step`` over the micro-world's
own tokens per step at that length (a step of the target model generates that many tokens instead), multiplies by
the number of questions (labels, benchmark) or training episodes, and divides by an assumed decode throughput
(``--throughput``: output tokens per second of the target model on the target GPU, batched — an input of the
projection, not something this package measured).

What it leaves out, stated in every table it writes: prompt and prefix tokens (with vLLM's prefix caching a branch
re-reads its shared prefix from the cache; the cost of the prefill that remains is not modelled), hidden-state
capture for the PUlSE features, retrieval, and the policy's own compute. The exact cache oracle's exponent comes
from as many points as the scaling bench could afford (often two): its row is an order of magnitude, said so.

Usage::

    kairos bench projection --scaling runs/bench/scaling/scaling_bench.json \\
        --scaling runs/bench/scaling/labels_to_64/scaling_bench.json --steps 50 --questions 1000 \\
        --tokens-per-step 64,300 --throughput 2500,12500 --out runs/bench/projection
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf
from envs.core.io import make_dir, write_json, write_text

log = logging.getLogger(__name__)

#: the scaling bench's chain-length costs the projection reads: name -> (row label, what one unit is)
COSTS = {
    "labels": ("warm start: counterfactual labels (exact)", "question"),
    "episode": ("one episode", "question"),
    "reinforce": ("training: REINFORCE rollouts", "episode"),
    "benchmark": ("benchmark: 4 fixed triggers on one trajectory cache", "question"),
    "oracle": ("cache oracle (exact, ≤ 4 calls)", "question"),
}


@dataclass
class ProjectionConfig(ConfigBase):
    """Settings of ``kairos bench projection`` (every number but the scaling JSON is an assumption of the
    projection)."""

    scaling: list[str] = helpf(["runs/bench/scaling/scaling_bench.json"],
                               "scaling_bench.json files of `kairos bench scaling` (their chain-length points merged)")
    steps: int = helpf(50, "reasoning steps per chain of the target setting", ge=1)
    questions: int = helpf(1000, "questions labelled by the warm start, and benchmarked", ge=1)
    tokens_per_step: list[int] = helpf([64, 300], "tokens the target model generates per step (one table each)",
                                       ge=1)
    throughput: list[float] = helpf([2500.0, 12500.0], "assumed batched decode throughput of the target model on "
                                    "the target GPU, output tokens/s (one column each)", gt=0)
    train_episodes: int = helpf(5120, "training episodes (the main recipe: 40 iterations × 128 episodes)", ge=1)
    target: str = helpf("a 7B model on one H100 (vLLM)", "what the throughput figures stand for, for the tables")
    out: str = helpf("runs/bench/projection", "output folder (projection.json, projection.md)")

    def validate(self) -> None:
        for name in ("scaling", "tokens_per_step", "throughput"):
            if not getattr(self, name):
                raise ConfigError(f"kairos bench projection: --{name.replace('_', '-')} is empty"
                                  + (" (run `kairos bench scaling` first and pass its scaling_bench.json)"
                                     if name == "scaling" else ""))
        if not all(math.isfinite(float(t)) for t in self.throughput):
            raise ConfigError(f"kairos bench projection: --throughput must be finite, got {self.throughput}")


# ------------------------------------------------------------------------------------------------ the numbers
def merged_points(paths: list[str]) -> tuple[dict[str, dict[int, dict]], list[dict[str, Any]]]:
    """Every cost's chain-length points of the scaling JSONs, by chain length (a later file's measured point
    replaces an earlier file's at the same length); and each file's command and machine."""
    points: dict[str, dict[int, dict]] = {}
    sources = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise ConfigError(f"kairos bench projection: --scaling {p}: no such file (run `kairos bench scaling "
                              f"--out DIR` and pass DIR/scaling_bench.json)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"kairos bench projection: --scaling {p} is not a scaling_bench.json ({e})") from None
        axes = data.get("axes") if isinstance(data, dict) else None
        axis = axes.get("chain_length") if isinstance(axes, dict) else None
        if not axis:
            raise ConfigError(f"kairos bench projection: --scaling {p} has no chain-length axis (run `kairos bench "
                              f"scaling --axes chain_length`)")
        for cost, size, row in _axis_rows(axis, p):
            points.setdefault(cost, {})[size] = row
        sources.append({"path": str(path), "command": data.get("command"),
                        "cpu_model": (data.get("environment") or {}).get("cpu_model")})
    return points, sources


def _axis_rows(axis: Any, p: str) -> list[tuple[str, int, dict]]:
    """``(cost, chain length, row)`` of every measured point of a scaling JSON's ``chain_length`` axis; a field of
    another shape is a :class:`ConfigError` naming the file and the field (not a traceback)."""
    def bad(field: str, want: str, got: Any) -> ConfigError:
        return ConfigError(f"kairos bench projection: --scaling {p}: field axes.chain_length{'.' + field if field else ''} must be {want}, "
                           f"got {got!r:.80}; pass a scaling_bench.json written by `kairos bench scaling`")

    if not isinstance(axis, dict):
        raise bad("", "a mapping (sizes, points)", axis)
    sizes, points = axis.get("sizes"), axis.get("points") or {}
    if not isinstance(sizes, list) or not all(isinstance(s, (int, float)) and not isinstance(s, bool)
                                              and math.isfinite(s) and float(s).is_integer() and s >= 1
                                              for s in sizes):
        raise bad("sizes", "a list of chain lengths (integers >= 1)", sizes)
    if not isinstance(points, dict):
        raise bad("points", "a mapping cost -> one row per size", points)
    out = []
    for cost, rows in points.items():
        if not isinstance(rows, list):
            raise bad(f"points.{cost}", "a list (one row per size)", rows)
        for size, row in zip(sizes, rows):
            if not row:  # a length the bench skipped
                continue
            if not isinstance(row, dict):
                raise bad(f"points.{cost}", "a list of rows (mappings with 'tokens')", row)
            tokens = row.get("tokens")
            if tokens is None:
                continue
            if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not math.isfinite(tokens):
                raise bad(f"points.{cost}[{size}].tokens", "a finite number", tokens)
            episodes = row.get("episodes")
            if episodes is not None and (isinstance(episodes, bool) or not isinstance(episodes, (int, float))):
                raise bad(f"points.{cost}[{size}].episodes", "a number", episodes)
            out.append((str(cost), int(size), row))
    return out


def project(cfg: ProjectionConfig) -> dict[str, Any]:
    """The projection's rows (see the module docstring)."""
    from eval.perf.scaling_report import fit_power_law

    points, sources = merged_points(cfg.scaling)
    fits: dict[str, dict[str, Any]] = {}
    for cost, by_size in points.items():
        sizes = sorted(by_size)
        per_unit = []
        for s in sizes:  # the reinforce point is one iteration of `episodes` episodes: per episode
            row = by_size[s]
            per_unit.append(float(row["tokens"]) / max(1.0, float(row.get("episodes") or 1))
                            if cost == "reinforce" else float(row["tokens"]))
        fits[cost] = {**fit_power_law(sizes, per_unit), "sizes": sizes, "tokens": per_unit}
    ep = fits.get("episode") or {}
    if ep.get("exponent") is None:
        raise ConfigError("kairos bench projection: the scaling JSONs have fewer than 2 chain lengths of the cost "
                          "'episode' with tokens > 0 (it sets the micro-world's tokens per step)")
    n = cfg.steps
    mw_tokens_per_step = ep["coefficient"] * n ** ep["exponent"] / n
    units = {"labels": cfg.questions, "episode": cfg.questions, "reinforce": cfg.train_episodes,
             "benchmark": cfg.questions, "oracle": cfg.questions}
    rows = []
    for tps in cfg.tokens_per_step:
        scale = tps / mw_tokens_per_step
        for cost, (label, unit) in COSTS.items():
            f = fits.get(cost)
            if not f or f.get("exponent") is None:
                rows.append({"cost": cost, "label": label, "tokens_per_step": tps, "masked": "fewer than 2 points"})
                continue
            per = f["coefficient"] * n ** f["exponent"] * scale
            total = per * units[cost]
            rows.append({"cost": cost, "label": label, "tokens_per_step": tps, "unit": unit, "units": units[cost],
                         "exponent": f["exponent"], "r2": f["r2"], "points": f["n"],
                         "max_measured_steps": max(f["sizes"]), "tokens_per_unit": per, "total_tokens": total,
                         "hours": {str(t): total / float(t) / 3600.0 for t in cfg.throughput},
                         "extrapolated": n > max(f["sizes"])})
    return {"config": cfg.to_dict(), "sources": sources, "micro_world_tokens_per_step": mw_tokens_per_step,
            "fits": {k: {kk: v for kk, v in f.items()} for k, f in fits.items()}, "rows": rows,
            "note": "a projection on paper from measured exponents and an assumed throughput, not a measurement"}


# ------------------------------------------------------------------------------------------------ the report
def _tokens(v: float) -> str:
    for div, suf in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:.3g}{suf}"
    return f"{v:.3g}"


def _hours(h: float) -> str:
    if h >= 24 * 365:
        return f"{h / 24 / 365:,.0f} years"
    if h >= 48:
        return f"{h / 24:,.1f} days"
    return f"{h:,.1f} h" if h >= 1 else f"{h * 60:,.0f} min"


def format_markdown(result: dict[str, Any]) -> str:
    """The projection as Markdown: one table per tokens-per-step, the assumptions above them."""
    c = result["config"]
    tps_all = c["tokens_per_step"]
    lines = [f"**A projection on paper, not a measurement**: {c['target']}, {c['questions']:,} questions of "
             f"{c['steps']}-step chains, {c['train_episodes']:,} training episodes; assumed decode throughput "
             + " / ".join(f"{t:,.0f}" for t in c["throughput"]) + " output tokens/s. Generated tokens only "
             "(prefix caching assumed to make a branch's shared prefix free; hidden-state capture, retrieval and "
             "the policy not counted). Exponents from the micro-world "
             f"(its LM writes {result['micro_world_tokens_per_step']:.1f} tokens a step at {c['steps']} steps):",
             ""]
    for tps in tps_all:
        lines += [f"*{tps} tokens a step ({tps * c['steps']:,} tokens a chain):*", "",
                  "| cost | exponent (R², points) | tokens per unit | total tokens | "
                  + " | ".join(f"hours at {t:,.0f} tok/s" for t in c["throughput"]) + " |",
                  "|---|---|---|---|" + "---|" * len(c["throughput"])]
        for r in (r for r in result["rows"] if r["tokens_per_step"] == tps):
            if "masked" in r:
                lines.append(f"| {r['label']} | – ({r['masked']}) | – | – |" + " – |" * len(c["throughput"]))
                continue
            fit = f"{r['exponent']:.2f} ({r['r2']:.3f}, {r['points']})" if r["r2"] is not None \
                else f"{r['exponent']:.2f} ({r['points']} points)"
            if r["points"] <= 2 or r["extrapolated"]:
                fit += f", measured to {r['max_measured_steps']} steps"
            lines.append(f"| {r['label']} | {fit} | {_tokens(r['tokens_per_unit'])} per {r['unit']} | "
                         f"{_tokens(r['total_tokens'])} | "
                         + " | ".join(_hours(r["hours"][str(t)]) for t in c["throughput"]) + " |")
        lines.append("")
    lines.append("Sources: " + "; ".join(f"`{s['command']}` ({s['cpu_model']})" for s in result["sources"]))
    return "\n".join(lines) + "\n"


def run(cfg: ProjectionConfig) -> dict[str, Any]:
    """Compute the projection and write ``projection.json`` and ``projection.md`` into ``cfg.out``."""
    result = project(cfg)
    out = Path(cfg.out)
    make_dir(out)
    write_json(out / "projection.json", result)
    write_text(out / "projection.md", format_markdown(result))
    return result


# ------------------------------------------------------------------------------------------------ CLI
def register(sub: Any) -> None:
    """Add ``kairos bench projection``."""
    p = sub.add_parser("projection", help="a projection on paper: GPU hours of labels, training and benchmark for "
                                          "long chains, from the scaling bench's exponents",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--scaling", action="append", default=None, help="a scaling_bench.json (repeatable)")
    for name, what in (("steps", "steps per chain"), ("questions", "questions"), ("train-episodes", "episodes"),
                       ("tokens-per-step", "tokens a step (comma-separated)"),
                       ("throughput", "output tokens/s (comma-separated)"), ("target", "what it stands for"),
                       ("out", "output folder")):
        p.add_argument("--" + name, dest=name.replace("-", "_"), default=None, help=what)
    p.set_defaults(func=cmd_projection)


def config_from_args(args: argparse.Namespace) -> ProjectionConfig:
    data: dict[str, Any] = {}
    if args.scaling:
        data["scaling"] = list(args.scaling)
    for name, kind in (("steps", int), ("questions", int), ("train_episodes", int), ("tokens_per_step", int),
                       ("throughput", float), ("target", str), ("out", str)):
        raw = getattr(args, name, None)
        if raw is None:
            continue
        try:
            data[name] = [kind(v) for v in raw.split(",") if v.strip()] if name in ("tokens_per_step", "throughput") \
                else kind(raw)
        except ValueError:
            raise ConfigError(f"kairos bench projection: --{name.replace('_', '-')} {raw!r} is not "
                              f"{'a list of numbers' if name in ('tokens_per_step', 'throughput') else 'a number'}") \
                from None
    return ProjectionConfig.from_dict(data, where="kairos bench projection")


def cmd_projection(args: argparse.Namespace) -> int:
    """``kairos bench projection``."""
    cfg = config_from_args(args)
    result = run(cfg)
    print(format_markdown(result))
    print(f"wrote {Path(cfg.out) / 'projection.json'} and projection.md")
    return 0
