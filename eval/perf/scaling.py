"""``kairos bench scaling``: how every cost of Kairos grows with the reasoning chain, the number of questions and the
corpus, on the micro-world (its 2.7M-parameter LM on CPU), with a power law fitted per cost.

Long chains come from the task ``microworld_chain`` (:mod:`envs.microworld.chain`): one episode answers ``k``
three-hop sub-questions in turn, ``4k`` steps with the ground truth of every sub-question kept. Three axes, each from
a cold trajectory cache per measurement (:mod:`eval.perf.scaling_costs`):

1. **chain length** (4, 8, 16, 32, 64 steps; ``--length-chains`` chains each): one episode, the counterfactual
   warm start's labels — exact (``labels``: every branch continued to the answer) and with a horizon
   (``labels_horizon``: every branch cut ``--labels-horizon`` steps past its decision; beside it, where both ran at a
   size, the share of decisions whose target ``y`` agrees with the exact label and the correlation of ΔR) —, the cache
   oracle, the exact oracle's labels (DAgger's), one REINFORCE iteration (rollout and update in this process, no Ray
   actors) and the benchmark per question;
2. **number of questions** (250, 1,000, 4,000, 10,000 chains of ``--questions-length`` steps, times ``--size``): the
   totals of the episodes, the labels and the benchmark;
3. **corpus size** (10³ → 10⁵ passages: the world's facts plus distractor facts of other seeded worlds): building
   the index, one query's search and one always-retrieve episode, for BM25 and — given a micro-world ColBERT
   checkpoint (``--colbert-checkpoint``; ``configs/retriever_colbert_microworld.yaml`` builds one) — ColBERT/PLAID
   (masked, saying so, without one).

**A real model's long chains** (``--env-from``, the chain-length axis only): the episodes of a train config's
``env_config`` — e.g. SmolLM2-135M-Instruct on vLLM writing one free-form thinking passage on HotpotQA,
``configs/experiments/long_chains/train_hotpotqa_thinking16_vllm.yaml`` —, each length made by budget forcing
(``reasoner_options`` ``min_steps = max_steps =`` the length: an early answer is replaced by "Wait," and the model goes
on), the env's ``max_steps`` the same length; the real task's quality (answer F1 or accuracy) as it is.

Measured per cost: wall and CPU seconds, generated tokens, LM forward passes, peak RSS above the measurement's start,
trajectory-cache bytes written; on vLLM, the engine's batched steps as the forward passes and the share of prompt
tokens its prefix cache served (``prefix_hit_rate``). A size whose projected time (the last two sizes' exponent)
exceeds ``--budget-s`` is skipped and said so. Each measure is fitted as ``a·size^b`` (log-log least squares: exponent b and R²; the smallest
size is the baseline). Writes ``scaling_bench.json``, ``scaling_bench.md`` and one log-log plot per axis
(``scaling_<axis>.png``) into ``--out`` and prints the tables.

Usage::

    kairos bench scaling --out runs/bench/scaling                          # --size 0.1: 25 … 1,000 questions
    kairos bench scaling --size 0.02 --chain-lengths 4,8 --corpus-sizes 1000,3000 --out /tmp/scaling   # seconds
    kairos bench scaling --colbert-checkpoint runs/colbert/minilm-micro --out runs/bench/scaling
    kairos bench scaling --env-from configs/experiments/long_chains/train_hotpotqa_thinking16_vllm.yaml \
        --axes chain_length --costs episode,labels,reinforce,benchmark --chain-lengths 4,8,16,32 --out runs/bench/scaling_vllm
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)

AXES = ("chain_length", "questions", "corpus")
RETRIEVERS = ("bm25", "colbert")
#: the measures fitted along each axis (the questions axis: what N questions cost in all)
AXIS_MEASURES = {
    "chain_length": ["wall_s", "tokens", "forwards", "peak_rss_mb", "cache_bytes", "tokens_per_decision",
                     "prefix_hit_rate"],
    "questions": ["total_wall_s", "total_tokens", "peak_rss_mb", "total_cache_bytes"],
    "corpus": ["wall_s", "cpu_s", "peak_rss_mb", "index_bytes", "tokens"],
}


@dataclass
class ScalingBenchConfig(ConfigBase):
    """Settings of ``kairos bench scaling`` (see the module docstring)."""

    out: str = helpf("runs/bench/scaling", "output directory (JSON, Markdown, plots)")
    size: float = helpf(0.1, "scales the questions axis' counts (1.0: 250, 1,000, 4,000, 10,000 chains)", gt=0)
    axes: list[str] = helpf(list(AXES), "axes to measure: " + ", ".join(AXES))
    costs: list[str] = helpf(["episode", "labels", "labels_horizon", "oracle", "oracle_labels", "reinforce",
                              "benchmark"], "costs along the chain-length axis")
    labels_horizon: int | None = helpf(None, "labels_horizon: steps each counterfactual branch is generated past its "
                                             "decision (WarmStartOptions.horizon; null: hops + 1, the rest of the "
                                             "decision's sub-question from any of its steps)", ge=1)
    question_costs: list[str] = helpf(["episode", "labels", "benchmark"], "costs along the questions axis")
    chain_lengths: list[int] = helpf([4, 8, 16, 32, 64], "chain lengths in steps (multiples of hops + 1)", ge=1)
    hops: int = helpf(3, "hops of every sub-question (a sub-question is hops steps and its answer line)", ge=1)
    length_chains: int = helpf(4, "chains measured per chain length", ge=1)
    question_counts: list[int] = helpf([250, 1000, 4000, 10000], "chains of the questions axis (times size)", ge=1)
    questions_length: int = helpf(8, "chain length (steps) of the questions axis", ge=1)
    corpus_sizes: list[int] = helpf([1000, 10000, 100000], "corpus sizes in passages (facts + distractors)", ge=1)
    corpus_length: int = helpf(4, "chain length (steps) of the corpus axis' episodes", ge=1)
    corpus_chains: int = helpf(8, "chains of the corpus axis' episodes and queries", ge=1)
    retrievers: list[str] = helpf(list(RETRIEVERS), "retrievers of the corpus axis: bm25, colbert (PLAID)")
    colbert_checkpoint: str = helpf("", "micro-world ColBERT checkpoint directory (empty: PLAID masked)")
    plaid_max_passages: int | None = helpf(None, "PLAID only up to this many passages (null: every corpus size)",
                                           ge=1)
    budget_s: float = helpf(180.0, "skip a size whose projected wall time exceeds this (seconds)", gt=0)
    max_retrievals: int = helpf(4, "retrievals allowed per episode (EnvConfig.max_retrievals_per_question)", ge=0)
    env_from: str | None = helpf(None, "a train config whose env_config gives a real model's chains (the chain_length "
                                       "axis only; each length by budget forcing); null: the micro-world's chains")
    split: str = helpf("train", "micro-world split the chains are drawn from")
    artifact: str | None = helpf(None, "micro-world artifact (default: the shipped one)")
    batch: int = helpf(16, "questions in flight per batched generation call", ge=1)
    seed: int = helpf(0, "seed of the chains and the distractors")
    threads: int = helpf(1, "torch threads", ge=1)

    def validate(self) -> None:
        from eval.perf.scaling_costs import COSTS

        for key, allowed in (("axes", AXES), ("costs", tuple(COSTS)), ("question_costs", tuple(COSTS)),
                             ("retrievers", RETRIEVERS)):
            bad = [v for v in getattr(self, key) if v not in allowed]
            if bad:
                raise ConfigError(f"ScalingBenchConfig.{key}: unknown '{bad[0]}' (valid: {', '.join(allowed)})")
        for key in ("chain_lengths", "question_counts", "corpus_sizes"):
            if not getattr(self, key):
                raise ConfigError(f"ScalingBenchConfig.{key}: give at least one size")
        if self.env_from is not None:
            from envs.env_config import EnvConfig

            if self.axes != ["chain_length"]:
                raise ConfigError(f"ScalingBenchConfig.axes: {self.axes} with env_from — a real model's chains are "
                                  "measured along the chain_length axis only (the questions and corpus axes run on "
                                  "the micro-world); set axes: [chain_length]")
            EnvConfig.from_yaml(self.env_from, section="env_config")  # its errors name the file and key
            return
        step = self.hops + 1
        for key in ("chain_lengths", "questions_length", "corpus_length"):
            vals = getattr(self, key)
            bad = [n for n in (vals if isinstance(vals, list) else [vals]) if n % step]
            if bad:
                raise ConfigError(f"ScalingBenchConfig.{key}: {bad[0]} steps is not a multiple of hops + 1 = {step} "
                                  f"(a sub-question is {self.hops} steps and its answer line); use multiples of "
                                  f"{step} or set hops")

    @property
    def horizon(self) -> int:
        """The horizon of the ``labels_horizon`` cost (``labels_horizon``, or hops + 1)."""
        return int(self.labels_horizon) if self.labels_horizon is not None else self.hops + 1

    def cost_fns(self) -> dict[str, Any]:
        """Every cost's function ``(env config, components, question indices, batch) -> row`` at this run's settings
        (``labels_horizon`` at :attr:`horizon`)."""
        from functools import partial

        from eval.perf.scaling_costs import COSTS

        return {**COSTS, "labels_horizon": partial(COSTS["labels_horizon"], horizon=self.horizon)}

    def scaled(self, n: int) -> int:
        """A count of the questions axis at this run's size (at least 2)."""
        return max(2, int(round(n * self.size)))


# ------------------------------------------------------------------------------------------------ envs
def chain_env(cfg: ScalingBenchConfig, length: int, chains: int, distractors: int = 0, retriever: str = "bm25",
              index_path: str | None = None):
    """The env of ``chains`` chains of ``length`` steps (one spare line per sub-question), λ of calls 0.1."""
    from envs.env_config import EnvConfig
    from eval.perf.scaling_costs import LAMBDA

    k = length // (cfg.hops + 1)
    return EnvConfig.from_preset("microworld", {
        "task": "microworld_chain", "split": cfg.split, "artifact": cfg.artifact, "rsus_components": ["ent"],
        "chain": {"questions": k, "hops": cfg.hops, "count": chains, "seed": cfg.seed, "distractors": distractors},
        "max_steps": length + k, "max_retrievals_per_question": cfg.max_retrievals, "costs": {"retrieval_calls": LAMBDA},
        "retriever": retriever, "index_path": index_path}, where="kairos bench scaling")


def real_chain_env(cfg: ScalingBenchConfig, length: int):
    """The env of ``cfg.env_from``'s ``env_config`` at ``length`` steps: budget forcing to that length (reasoner
    ``min_steps`` and ``max_steps``), the env's ``max_steps`` the same, λ of calls 0.1 and this run's retrieval cap."""
    from envs.env_config import EnvConfig
    from eval.perf.scaling_costs import LAMBDA

    base = EnvConfig.from_yaml(cfg.env_from, section="env_config")
    opts = {**base.reasoner_options, "min_steps": length, "max_steps": length}
    return base.replace(max_steps=length, reasoner_options=opts, max_questions=None,
                        max_retrievals_per_question=cfg.max_retrievals, costs={"retrieval_calls": LAMBDA})


def projected_over(rows: list[dict], sizes: list[float], nxt: float, budget: float) -> str | None:
    """Why the next size is skipped (its wall time projected from the last two measured sizes' exponent, or the last
    one alone past the budget), or None to measure it."""
    import math

    done = [(s, r["total_wall_s"]) for s, r in zip(sizes, rows) if r and "skipped" not in r]
    if not done:
        return "an earlier size was skipped" if any(r and "skipped" in r for r in rows) else None
    s1, t1 = done[-1]
    if t1 > budget:
        return f"the previous size took {t1:.0f} s > budget {budget:g} s"
    if len(done) < 2 or t1 <= 0 or done[-2][1] <= 0:
        return None
    s0, t0 = done[-2]
    b = max(0.0, math.log(t1 / t0) / math.log(s1 / s0))
    proj = t1 * (nxt / s1) ** b
    return f"projected {proj:.0f} s (exponent {b:.2f}) > budget {budget:g} s" if proj > budget else None


def measure_along(sizes: list[float], costs: list[str], setup, budget: float, bar,
                  fns: dict[str, Any] | None = None) -> dict[str, list[dict]]:
    """Each cost at each size (``setup(size) -> (env config, components, question indices, batch)``), skipping sizes
    projected past the budget. Each cost runs once on one question at the smallest size first, unmeasured (one-time
    work — lazy imports, first allocations — is no part of the baseline). ``fns``: the cost functions by name
    (default :data:`eval.perf.scaling_costs.COSTS`). Where ``labels`` and ``labels_horizon`` both ran at a size, the
    horizon row gets their agreement (:func:`eval.perf.scaling_costs.label_agreement`)."""
    from eval.perf.scaling_costs import COSTS, label_agreement

    run = fns or COSTS
    cfg0, comps0, _, batch0 = setup(sizes[0])
    for c in costs:
        bar.set_postfix_str(f"{c}: warm-up")
        try:
            run[c](cfg0, comps0, [0], batch0)
        except ValueError:
            pass  # (measured below, where the error is reported)
    points: dict[str, list[dict]] = {c: [] for c in costs}
    for size in sizes:
        todo = {c: projected_over(points[c], sizes, size, budget) for c in costs}
        env = setup(size) if any(why is None for why in todo.values()) else None
        for c in costs:
            if todo[c] is not None:
                points[c].append({"skipped": todo[c], "skipped_short": "skipped"})
            else:
                bar.set_postfix_str(f"{c} at {size:g}")
                try:
                    points[c].append(run[c](*env))
                except ValueError as e:  # e.g. the exact oracle's search past its leaf cap: said in the report
                    log.warning("%s at %g: not measured (%s)", c, size, e)
                    points[c].append({"skipped": f"not measured: {e}", "skipped_short": "failed"})
                else:
                    log.info("%s at %g: %.1f s", c, size, points[c][-1]["total_wall_s"])
            bar.update(1)
        labels = {c: points[c][-1].pop("_labels", None) for c in costs}  # (question, ΔR): never in the report
        if labels.get("labels") is not None and labels.get("labels_horizon") is not None:
            agree = label_agreement(labels["labels"], labels["labels_horizon"])
            if agree is not None:
                points["labels_horizon"][-1].update(agree)
    return points


def _axis(title: str, size_label: str, description: str, sizes: list, points: dict, measures: list[str],
          masked: list[str] | None = None) -> dict[str, Any]:
    from eval.perf.scaling_report import fit_axis

    return {"title": title, "size_label": size_label, "description": description, "sizes": sizes, "points": points,
            "measures": measures, "fits": fit_axis(sizes, points, measures), "masked": masked or []}


def chain_length_axis(cfg: ScalingBenchConfig, bar) -> dict[str, Any]:
    from envs.components import build_components

    chains = cfg.length_chains

    def setup(length):
        env = real_chain_env(cfg, int(length)) if cfg.env_from else chain_env(cfg, int(length), chains)
        return env, build_components(env), list(range(chains)), cfg.batch

    points = measure_along(list(cfg.chain_lengths), list(cfg.costs), setup, cfg.budget_s, bar, cfg.cost_fns())
    what = (f"{chains} chains of {cfg.env_from}'s env per length, forced to it by budget forcing" if cfg.env_from
            else f"{chains} chains of {cfg.hops}-hop sub-questions per length")
    return _axis("Cost against chain length", "steps",
                 f"{what} ({', '.join(map(str, cfg.chain_lengths))} steps); per question (episode: per episode; "
                 "REINFORCE: per iteration of one episode per chain)"
                 + (f"; labels_horizon: horizon {cfg.horizon} steps." if "labels_horizon" in cfg.costs else "."),
                 list(cfg.chain_lengths), points, AXIS_MEASURES["chain_length"])


def questions_axis(cfg: ScalingBenchConfig, bar) -> dict[str, Any]:
    from envs.components import build_components

    counts = sorted({cfg.scaled(n) for n in cfg.question_counts})
    env = chain_env(cfg, cfg.questions_length, max(counts))
    comps = build_components(env)
    points = measure_along(counts, list(cfg.question_costs),
                           lambda n: (env, comps, list(range(int(n))), cfg.batch), cfg.budget_s, bar,
                           cfg.cost_fns())
    return _axis("Cost against the number of questions", "questions",
                 f"Chains of {cfg.questions_length} steps; the totals over all questions.", counts, points,
                 AXIS_MEASURES["questions"])


def corpus_point(cfg: ScalingBenchConfig, env: Any, kind: str, out: Path) -> list[dict[str, Any]]:
    """``[index, search, episode]`` rows of one retriever over ``env``'s corpus: building the index into ``out``,
    one query's search (the chains' sub-questions as queries), one always-retrieve episode with that index."""
    from envs.components import build_components
    from envs.microworld.chain import chain_corpus
    from eval.perf.scaling_costs import episode_cost, index_cost, search_cost

    settings = {"checkpoint": cfg.colbert_checkpoint, "doc_maxlen": 32} if kind == "colbert" else None
    index = index_cost(kind, chain_corpus(env), out, settings)
    e = env.replace(retriever=kind, index_path=str(out))  # the index just built, loaded by the env
    comps = build_components(e)
    queries = [p.text for q in comps.task.questions for p in q.parts][:64]
    return [index, search_cost(comps.retriever, queries, e.top_k),
            episode_cost(e, comps, list(range(cfg.corpus_chains)), cfg.batch, p=1.0)]


def corpus_axis(cfg: ScalingBenchConfig, bar) -> dict[str, Any]:
    """Index build, one query's search and one always-retrieve episode per corpus size and retriever (each retriever
    measured once on the world's facts alone first, unmeasured: its one-time work is no part of the baseline)."""
    from envs.microworld.chain import chain_corpus

    chains, masked = cfg.corpus_chains, []
    kinds = [k for k in cfg.retrievers if k == "bm25" or cfg.colbert_checkpoint]
    if "colbert" in cfg.retrievers and not cfg.colbert_checkpoint:
        masked.append("PLAID (colbert) masked: no ColBERT checkpoint given (--colbert-checkpoint DIR; `kairos retriever "
                      "train-colbert` as in configs/retriever_colbert_microworld.yaml builds one)")
    points: dict[str, list[dict]] = {f"{k} {p}": [] for k in kinds for p in ("index", "search", "episode")}
    base = chain_env(cfg, cfg.corpus_length, chains)
    n_facts = len(chain_corpus(base))
    small = [s for s in cfg.corpus_sizes if s < n_facts]
    if small:
        raise ConfigError(f"ScalingBenchConfig.corpus_sizes: {small[0]} passages is below the world's {n_facts} "
                          f"facts; give sizes >= {n_facts}")
    with tempfile.TemporaryDirectory(prefix="kairos-scaling-index-") as tmp:
        for kind in kinds:
            bar.set_postfix_str(f"{kind}: warm-up")
            corpus_point(cfg, base, kind, Path(tmp) / f"{kind}-warm-up")
        for size in cfg.corpus_sizes:
            env = base.replace(chain={**base.chain.to_dict(), "distractors": size - n_facts})
            for kind in kinds:
                names = [f"{kind} {p}" for p in ("index", "search", "episode")]
                if kind == "colbert" and cfg.plaid_max_passages and size > cfg.plaid_max_passages:
                    rows = [{"skipped": f"above plaid_max_passages = {cfg.plaid_max_passages}",
                             "skipped_short": "masked"}] * 3
                else:
                    bar.set_postfix_str(f"{kind} at {size} passages")
                    rows = corpus_point(cfg, env, kind, Path(tmp) / f"{kind}-{size}")
                for name, row in zip(names, rows):
                    points[name].append(row)
                bar.update(1)
    return _axis("Cost against corpus size", "passages",
                 f"The world's {n_facts} facts plus distractor facts of other seeded worlds; index: per build; "
                 f"search: per query (one at a time); episode: per always-retrieve episode of {cfg.corpus_length} "
                 f"steps ({chains} chains).", list(cfg.corpus_sizes), points, AXIS_MEASURES["corpus"], masked)


# ------------------------------------------------------------------------------------------------ the run
def environment() -> dict[str, Any]:
    import os
    import platform

    import torch

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU") \
        if Path("/proc/cpuinfo").is_file() else platform.processor()
    return {"cpu_model": model, "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__}


def run_bench(cfg: ScalingBenchConfig, command: str = "kairos bench scaling") -> dict[str, Any]:
    """Measure every axis the config names; writes the JSON, the Markdown and the plots under ``cfg.out``."""
    import torch
    from tqdm.auto import tqdm

    from eval.perf.scaling_report import render

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = {"chain_length": len(cfg.chain_lengths) * len(cfg.costs),
             "questions": len(cfg.question_counts) * len(cfg.question_costs),
             "corpus": len(cfg.corpus_sizes) * len([k for k in cfg.retrievers
                                                     if k == "bm25" or cfg.colbert_checkpoint])}
    result: dict[str, Any] = {"config": cfg.to_dict(), "environment": environment(), "command": command, "axes": {}}
    t0 = time.perf_counter()
    runners = {"chain_length": chain_length_axis, "questions": questions_axis, "corpus": corpus_axis}
    with tqdm(total=sum(steps[a] for a in cfg.axes), desc="scaling bench", unit="measurement") as bar:
        for axis in cfg.axes:
            result["axes"][axis] = runners[axis](cfg, bar)
    result["seconds"] = time.perf_counter() - t0
    render(result, out)
    return result


# ------------------------------------------------------------------------------------------------ CLI
_LISTS = {"axes": str, "costs": str, "question_costs": str, "retrievers": str, "chain_lengths": int,
          "question_counts": int, "corpus_sizes": int}
_SCALARS = {"out": str, "size": float, "hops": int, "labels_horizon": int, "length_chains": int,
            "questions_length": int, "corpus_length": int, "corpus_chains": int, "colbert_checkpoint": str,
            "plaid_max_passages": int, "budget_s": float, "max_retrievals": int, "env_from": str, "split": str,
            "artifact": str, "batch": int, "seed": int, "threads": int}


def register(sub: Any) -> None:
    """Add ``kairos bench scaling``."""
    import dataclasses

    helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(ScalingBenchConfig)}
    p = sub.add_parser("scaling", help="how every cost grows with chain length, questions and corpus (power-law fits)",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--config", default=None, help="YAML with the settings (flags override it)")
    p.add_argument("--render-only", action="store_true",
                   help="measure nothing: fit and write the tables and plots of the scaling_bench.json in --out again")
    for name in (*_LISTS, *_SCALARS):
        extra = " (comma-separated)" if name in _LISTS else ""
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None, help=helps[name] + extra)
    p.set_defaults(func=cmd_bench)


def config_from_args(args: argparse.Namespace) -> ScalingBenchConfig:
    """The settings of the YAML (``--config``) with the flags over it; a bad value is one :class:`ConfigError`."""
    data = ScalingBenchConfig.from_yaml(args.config).to_dict() if args.config else {}
    for name, kind in {**_LISTS, **_SCALARS}.items():
        raw = getattr(args, name, None)
        if raw is None:
            continue
        flag = "--" + name.replace("_", "-")
        try:
            data[name] = ([kind(v.strip()) for v in raw.split(",") if v.strip()] if name in _LISTS else kind(raw))
        except ValueError:
            what = "a comma-separated list of " + ("integers" if kind is int else "names") if name in _LISTS \
                else {int: "an integer", float: "a number"}.get(kind, "a value")
            raise ConfigError(f"kairos bench scaling: {flag} {raw!r} is not {what}") from None
    return ScalingBenchConfig.from_dict(data, where="kairos bench scaling")


def cmd_bench(args: argparse.Namespace) -> int:
    """``kairos bench scaling``."""
    import json

    from eval.perf.scaling_report import format_markdown, render

    cfg = config_from_args(args)
    if args.render_only:
        path = Path(cfg.out) / "scaling_bench.json"
        if not path.is_file():
            raise FileNotFoundError(f"--render-only: no {path} (run the benchmark into --out {cfg.out} first)")
        result = json.loads(path.read_text())
        for axis in result["axes"]:
            result["axes"][axis].setdefault("measures", AXIS_MEASURES[axis])
        render(result, cfg.out)
    else:
        result = run_bench(cfg, "kairos " + " ".join(sys.argv[1:]) if sys.argv[1:] else "kairos bench scaling")

    sys.stdout.write(format_markdown(result))
    log.info("wrote %s", Path(cfg.out) / "scaling_bench.json")
    return 0
