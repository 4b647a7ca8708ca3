"""The benchmark at every budget: one cost-conditioned policy against fixed triggers calibrated at each λ.

A fixed trigger is a curve — its threshold sweep trades calls for accuracy — and a policy trained at one λ is one
point of it. A cost-conditioned policy (trained with ``observe_costs``, :mod:`train.conditioning`) is a curve too:
told the budget λ, it decides for it. With ``BenchConfig.lambdas`` the benchmark runs once per λ, top to bottom:

1. **one snapshot for every budget**: each conditioned learned row with ``select_on_dev`` evaluates its run's
   snapshots on dev at every λ and keeps the one with the best mean dev reward (:func:`select_over_budgets`) — one
   policy, not one per λ;
2. **a benchmark per λ** (``<out_dir>/lambda=<λ>/``): every fixed trigger calibrated on dev *at that λ* (threshold,
   query mode, never-fire included), the oracle searched at that λ, the conditioned policy told that λ, the
   specialists (rows with ``lam``: trained at one λ) run as they are; the test curves once (they do not depend on λ);
   the episodes of a trigger that does not observe λ (every fixed trigger's dev sweep and test run, the baselines,
   Random at a rate it ran at before) are generated at the first λ and copied to the others with their rewards recomputed — the rows a rerun
   would write, at a fraction of the time (``BenchConfig.reuse_episodes_from``, :meth:`Runner.run`);
3. **the frontier** (:func:`budget_summary`): per λ, each learned group (seeds pooled per question) − the best fixed
   trigger at that λ and the oracle-gap fraction, with paired CIs; the conditioned policy against the specialist
   trained at that λ; the accuracy-vs-calls curves — the conditioned policy's, every fixed trigger's, the oracle's —
   and the area between the learned and the best fixed frontier over the calls range both cover
   (``budgets.json``, ``budgets.md``, ``frontier.png``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("eval.bench.policies")

__all__ = ["budget_summary", "frontier_area", "lambda_dir", "policy_reads_budget", "run_budgets",
           "select_over_budgets"]


def lambda_dir(out_dir: str | Path, lam: float) -> Path:
    """The folder of the benchmark at ``lam``."""
    return Path(out_dir) / f"lambda={lam:g}"


def policy_reads_budget(path: str | Path) -> bool:
    """Whether the exported policy at ``path`` observes its cost weights (field ``costs``: a cost-conditioned
    policy)."""
    spec = Path(path) / "spec.json"
    return spec.is_file() and "costs" in (json.loads(spec.read_text()).get("spec", {}).get("fields") or {})


def _per_lambda(cfg, lam: float, pinned: dict[str, str], curves: bool, reuse_from: float | None = None):
    """The benchmark at ``lam``: the config's, its λ and folder changed, conditioned rows pinned to the snapshot
    chosen over every budget, test curves only where ``curves``; the episodes of triggers that do not observe λ
    copied from the benchmark at ``reuse_from`` (their rewards recomputed at ``lam``: :meth:`Runner.run`)."""
    methods = []
    for m in cfg.methods:
        if m.name in pinned:
            m = dataclasses.replace(m, path=pinned[m.name], select_on_dev=False)
        methods.append(m)
    reuse = str(lambda_dir(cfg.out_dir, reuse_from)) if reuse_from is not None else cfg.reuse_episodes_from
    return dataclasses.replace(cfg, lambda_retrieval=float(lam), out_dir=str(lambda_dir(cfg.out_dir, lam)),
                               lambdas=[], methods=methods, test_curves=bool(cfg.test_curves and curves),
                               reuse_episodes_from=reuse)


def select_over_budgets(cfg) -> tuple[dict[str, str], dict[str, Any]]:
    """Each conditioned learned row (told each λ: no ``lam`` label) with ``select_on_dev``: its snapshots on dev at
    every λ (the per-λ folders' per-question files, resumable), the one with the best mean dev reward kept. Returns
    ``(pinned paths, the selection record)``."""
    from eval.bench.calibration import snapshot_candidates
    from eval.bench.config import parse_slice
    from eval.bench.methods import tag
    from eval.bench.runner import Runner

    rows = [m for m in cfg.methods if m.kind == "learned" and m.select_on_dev and m.lam is None
            and policy_reads_budget(m.path)]
    if not rows:
        return {}, {}
    dev = parse_slice(cfg.dev, "dev")
    scores: dict[str, dict[str, list[float]]] = {m.name: {} for m in rows}
    for lam in cfg.lambdas:
        runner = Runner(_per_lambda(cfg, lam, {}, curves=False))
        for m in rows:
            mode = m.modes(runner)[0]
            for c in snapshot_candidates(m.path):
                spec = dataclasses.replace(m, path=str(c), select_on_dev=False)
                r = runner.run(spec.make_trigger(), "dev", dev, tag=tag(m.name, mode, f"{c.parent.name}_{c.name}"),
                               env=m.env, mode=mode, querygen=m.querygen)
                scores[m.name].setdefault(str(c), []).append(float(r["reward"]))
    pinned, record = {}, {}
    for name, by_path in scores.items():
        means = {p: float(np.mean(v)) for p, v in by_path.items()}
        best = max(means, key=lambda p: (means[p], -list(means).index(p)))  # ties: the earlier snapshot
        pinned[name] = best
        record[name] = {"chosen": best, "mean_dev_reward": means, "lambdas": list(cfg.lambdas)}
        log.info("%s: snapshot %s chosen on dev over λ = %s (mean reward %.3f)", name, best,
                 ", ".join(f"{x:g}" for x in cfg.lambdas), means[best])
    return pinned, record


def run_budgets(cfg, run_one) -> dict[str, Any]:
    """Steps 1–3 (``run_one``: :func:`eval.bench.policies.run_bench` of one λ). Returns the summary of the benchmark
    at ``cfg.lambda_retrieval`` with ``budgets``: the frontier summary."""
    from envs.core.io import write_json, write_text

    pinned, selection = select_over_budgets(cfg)
    summaries = {}
    for i, lam in enumerate(cfg.lambdas):
        log.info("bench %s: λ = %g (%d of %d)", cfg.name, lam, i + 1, len(cfg.lambdas))
        # the first λ runs every episode; each later one copies those no λ changes (fixed triggers' sweeps, runs)
        summaries[float(lam)] = run_one(_per_lambda(cfg, lam, pinned, curves=(i == 0),
                                                    reuse_from=cfg.lambdas[0] if i else None))
    out = Path(cfg.out_dir)
    budgets = budget_summary(cfg, summaries, selection)
    write_json(out / "budgets.json", budgets)
    plot_frontier(budgets, out / "frontier.png")
    write_text(out / "budgets.md", budgets_markdown(budgets))
    log.info("budgets: %s", out / "budgets.md")
    head = dict(summaries[float(cfg.lambda_retrieval)])
    head["budgets"] = budgets
    return head


# ---------------------------------------------------------------------------------------------- the frontier
def _groups(cfg, methods: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """Learned rows by group (a row without one is its own): ``{group: {rows, conditioned, lam}}``."""
    out: dict[str, dict[str, Any]] = {}
    for m in cfg.methods:
        if m.kind != "learned" or m.name not in methods:
            continue
        g = out.setdefault(m.group or m.name, {"rows": [], "conditioned": False, "lam": m.lam, "calibrated": False})
        g["rows"].append(m.name)
        # conditioned: told each benchmark's λ; a row labelled with the λ it was trained at is that λ's specialist
        g["conditioned"] |= m.lam is None and bool(m.path) and policy_reads_budget(m.path)
        g["calibrated"] |= bool(getattr(m, "calibrate", False))
    return out


def _rewards(summary: dict, name: str) -> np.ndarray:
    return np.asarray(summary["rewards"][name], dtype=float)


def budget_summary(cfg, summaries: dict[float, dict], selection: dict[str, Any] | None = None) -> dict[str, Any]:
    """The frontier summary of the per-λ benchmarks (see the module docstring, step 3)."""
    from eval import stats

    first = summaries[min(summaries)]
    groups = _groups(cfg, first["methods"])
    per: dict[str, Any] = {}
    learned_curves: dict[str, list[dict[str, float]]] = {g: [] for g in groups}
    oracle_curve, fixed_points = [], {}
    for lam, s in sorted(summaries.items()):
        best, oracle = s.get("best_fixed"), s.get("oracle")
        row: dict[str, Any] = {"best_fixed": best, "best_fixed_reward": s["methods"][best]["reward"] if best else None,
                               "oracle": oracle, "oracle_reward": s["methods"][oracle]["reward"] if oracle else None,
                               "groups": {}}
        for g, info in groups.items():
            rows = [k for k in info["rows"] if k in s.get("rewards", {})]  # (a skipped row has none)
            if not rows:
                continue
            pooled = np.mean([_rewards(s, k) for k in rows], axis=0)
            acc = float(np.mean([s["methods"][k]["accuracy"] for k in rows]))
            calls = float(np.mean([s["methods"][k]["calls"] for k in rows]))
            cell: dict[str, Any] = {"reward": float(pooled.mean()), "accuracy": acc, "calls": calls,
                                    "seeds": len(rows), "seed_rewards": [s["methods"][k]["reward"] for k in rows]}
            if best:
                cell["vs_best_fixed"] = stats.paired_bootstrap(pooled, _rewards(s, best), n_resamples=cfg.n_resamples,
                                                               seed=cfg.seed)
                if oracle:
                    cell["gap"] = stats.gap_fraction(pooled, _rewards(s, best), _rewards(s, oracle),
                                                     n_resamples=cfg.n_resamples, seed=cfg.seed)
            row["groups"][g] = cell
            learned_curves[g].append({"lambda": lam, "calls": calls, "accuracy": acc})
        specialists = {g: i for g, i in groups.items() if not i["conditioned"] and not i["calibrated"]
                       and i["lam"] is not None and abs(float(i["lam"]) - lam) < 1e-9}  # trained at this λ
        row["vs_specialist"] = {}
        for g, info in groups.items():
            if not info["conditioned"] or g not in row["groups"]:
                continue
            for sg, sinfo in specialists.items():
                if sg not in row["groups"]:
                    continue
                a = np.mean([_rewards(s, k) for k in info["rows"] if k in s["rewards"]], axis=0)
                b = np.mean([_rewards(s, k) for k in sinfo["rows"] if k in s["rewards"]], axis=0)
                row["vs_specialist"][f"{g} vs {sg}"] = {"conditioned": g, "specialist": sg, **stats.paired_bootstrap(
                    a, b, n_resamples=cfg.n_resamples, seed=cfg.seed)}
        if oracle:
            oracle_curve.append({"lambda": lam, "calls": s["methods"][oracle]["calls"],
                                 "accuracy": s["methods"][oracle]["accuracy"]})
        for k, m in s["methods"].items():
            if m["kind"] == "fixed":
                pts = fixed_points.setdefault(k, set())
                pts.add((round(m["calls"], 6), round(m["accuracy"], 6)))
                for c in m.get("curve") or []:
                    pts.add((round(c["calls"], 6), round(c["accuracy"], 6)))
        per[f"{lam:g}"] = row
    fixed_curves = {k: sorted(v) for k, v in fixed_points.items()}
    all_fixed = [p for v in fixed_curves.values() for p in v]
    areas = {g: frontier_area([(c["calls"], c["accuracy"]) for c in pts], all_fixed)
             for g, pts in learned_curves.items() if groups[g]["conditioned"]}
    return {"name": cfg.name, "lambdas": [float(x) for x in sorted(summaries)], "headline_lambda": cfg.lambda_retrieval,
            "n_test": first["setup"]["n_test"], "setup": first["setup"], "per_lambda": per,
            "groups": groups,
            "curves": {"learned": learned_curves, "oracle": oracle_curve,
                       "fixed": {k: [list(p) for p in v] for k, v in fixed_curves.items()}},
            "area": areas, "selection": selection or {}}


def frontier_area(learned: list[tuple[float, float]], fixed: list[tuple[float, float]], points: int = 400
                  ) -> dict[str, Any]:
    """The area between the learned frontier and the best fixed frontier (each: the best accuracy reachable with at
    most x calls per question, operating points mixed — :func:`eval.stats.accuracy_at_budget`) over the calls range
    both cover; ``mean_advantage`` is the area over the range's width (accuracy points on average).

    >>> r = frontier_area([(0.5, 0.8), (1.0, 0.9)], [(0.0, 0.5), (1.0, 0.7)])
    >>> r["range"], round(r["area"], 3), round(r["mean_advantage"], 3)
    ([0.5, 1.0], 0.1, 0.2)
    """
    from eval import stats

    if not learned or not fixed:
        return {"range": None, "area": None, "mean_advantage": None}
    lo = max(min(c for c, _ in learned), min(c for c, _ in fixed))
    hi = min(max(c for c, _ in learned), max(c for c, _ in fixed))
    if hi <= lo:
        return {"range": [lo, hi], "area": None, "mean_advantage": None}
    xs = np.linspace(lo, hi, points)
    diff = np.array([(stats.accuracy_at_budget(learned, x) or 0.0) - (stats.accuracy_at_budget(fixed, x) or 0.0)
                     for x in xs])
    area = float(np.sum((diff[1:] + diff[:-1]) / 2 * np.diff(xs)))
    return {"range": [float(lo), float(hi)], "area": area, "mean_advantage": area / float(hi - lo)}


# ---------------------------------------------------------------------------------------------- report
def budgets_markdown(b: dict[str, Any]) -> str:
    """``budgets.md``: the per-λ table and the frontier."""
    groups = b["groups"]
    lines = [f"# {b['name']}: every budget", "",
             f"{b['n_test']} test questions; at each λ the fixed triggers are calibrated on dev at that λ (threshold, "
             "query mode, never-fire included) and the best of them on dev is 'best fixed'; learned rows of one group "
             "are seeds, pooled per question; CIs are paired bootstraps over questions.", "",
             "![frontier](frontier.png)", ""]
    head = "| λ | best fixed (reward) | oracle |" + "".join(f" {g}: reward / calls / − best fixed [95% CI] / gap |"
                                                          for g in groups)
    lines += [head, "|---|---|---|" + "---|" * len(groups)]
    for lam, row in b["per_lambda"].items():
        cells = []
        for g in groups:
            c = row["groups"].get(g)
            if c is None:
                cells.append("–")
                continue
            d, gap = c.get("vs_best_fixed"), c.get("gap")
            cells.append(f"{c['reward']:.3f} / {c['calls']:.2f} / "
                         + (f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]" if d else "–")
                         + (f" / {gap['fraction']:.2f}" if gap and gap.get("fraction") == gap.get("fraction") else ""))
        lines.append(f"| {lam} | {row['best_fixed']} ({row['best_fixed_reward']:.3f}) | "
                     f"{row['oracle_reward']:.3f} | " + " | ".join(cells) + " |")
    spec = [(lam, g, v) for lam, row in b["per_lambda"].items() for g, v in row["vs_specialist"].items()]
    if spec:
        lines += ["", "Cost-conditioned vs the specialist trained at that λ (reward, paired):", "",
                  "| λ | conditioned | specialist | difference [95% CI] |", "|---|---|---|---|"]
        lines += [f"| {lam} | {v['conditioned']} | {v['specialist']} | {v['diff']:+.3f} [{v['lo']:+.3f}, "
                  f"{v['hi']:+.3f}] |" for lam, _, v in spec]
    for g, a in b["area"].items():
        if a.get("area") is not None:
            lines += ["", f"Area between {g}'s frontier and the best fixed frontier over calls {a['range'][0]:.2f}–"
                          f"{a['range'][1]:.2f}: {a['area']:+.4f} (accuracy × calls; on average {a['mean_advantage']:+.3f} "
                          "accuracy at equal calls)."]
    return "\n".join(lines) + "\n"


def plot_frontier(b: dict[str, Any], out_png: str | Path) -> Path:
    """Accuracy vs calls: every fixed trigger's operating points (thin lines), the best fixed frontier (dashed), the
    oracle at each λ, and each learned group's points (the conditioned policy's connected, labelled with λ)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval import stats
    from eval.bench.plots import _save

    fig, ax = plt.subplots(figsize=(8.4, 5.4))
    fixed = b["curves"]["fixed"]
    cmap = plt.get_cmap("tab20").colors
    for i, (name, pts) in enumerate(sorted(fixed.items())):
        xs, ys = zip(*sorted(pts)) if pts else ((), ())
        ax.plot(xs, ys, color=cmap[i % len(cmap)], lw=0.8, alpha=0.55, marker=".", ms=3, label=name if len(pts) > 2
                else None)
    all_fixed = [tuple(p) for v in fixed.values() for p in v]
    if all_fixed:
        top = max(c for c, _ in all_fixed)
        xs = np.linspace(0.0, top, 200)
        ax.plot(xs, [stats.accuracy_at_budget(all_fixed, x) or np.nan for x in xs], color="black", ls="--", lw=1.3,
                label="best fixed frontier")
    orc = b["curves"]["oracle"]
    if orc:
        ax.plot([o["calls"] for o in orc], [o["accuracy"] for o in orc], color="grey", marker="D", ms=5, lw=1.0,
                label="cache oracle at each λ")
    conditioned = iter([("crimson", "*"), ("navy", "X"), ("darkgoldenrod", "D"), ("teal", "^")])  # one per curve
    for j, (g, pts) in enumerate(b["curves"]["learned"].items()):
        if not pts:
            continue
        cond = b["groups"][g]["conditioned"]
        color, marker = next(conditioned, ("crimson", "*")) if cond else (plt.get_cmap("Dark2").colors[j % 8], "P")
        if cond:
            ax.plot([p["calls"] for p in pts], [p["accuracy"] for p in pts], color=color, marker=marker,
                    ms=13 if marker == "*" else 8, lw=2.0, label=f"{g} (one policy, told λ)", zorder=5)
            ends = [(pts[0], 5), (pts[-1], -12)] if len(pts) > 1 else [(pts[0], 5)]  # the other λ lie between
            for p, dy in ends:
                ax.annotate(f"λ={p['lambda']:g}", (p["calls"], p["accuracy"]), xytext=(6, dy),
                            textcoords="offset points", fontsize=7.5, color=color)
        else:
            lam = b["groups"][g]["lam"]
            own = [p for p in pts if lam is not None and abs(p["lambda"] - float(lam)) < 1e-9] or pts
            ax.scatter([p["calls"] for p in own], [p["accuracy"] for p in own], color=color, marker=marker, s=90,
                       edgecolors="black", linewidths=0.5, zorder=4, label=f"{g} (trained at one λ)")
    ax.set_xlabel("retrieval calls per question (test)")
    ax.set_ylabel("accuracy (test)")
    ax.set_title(f"{b['name']}: accuracy vs retrieval calls at every budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    return _save(fig, Path(out_png))
