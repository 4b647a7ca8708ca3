"""``kairos bench querygen``: who writes the better retrieval query for a flagged step?

On the held-out flagged steps of a QueryGen run's world (:mod:`policies.querygen.data`; micro-world: the
first wrong step of each test chain, whose prior steps are all correct; HotpotQA: SmolLM2's first steps on
dev[1:500:2]) every method writes one query; the world's retriever (the env's: BM25 over its corpus)
returns the top 3; we score

* **Recall@1 / Recall@3** — a gold passage (the evidence the step lacks) at rank 1 / in the top 3;
* **step fixed** (micro-world only: its steps have ground-truth labels) — the step regenerated with the
  passage the env's selection rule injects (the first top-3 passage not used before: here the top one),
  in step mode, is correct;
* **cost** — query tokens, and generation seconds per query (batched, and at batch 1).

Methods: the fixed formulations (``step`` text, ``content_words``, ``question_step``, ``info_need``,
``question``), the mode-selecting QueryGen head of a trained RLlib policy (micro-world; it picks one of the
first four formulations from the env observation at that very step), the SFT-only generator and the
RL-trained generator (``<out_dir>/sft``, ``<out_dir>/rl``). Per-question means (HotpotQA has up to two
steps per question), bootstrap 95% CIs and question-level paired bootstrap differences (10,000 resamples,
fixed seed) of the generators against every fixed formulation.

Example (shell)::

    kairos bench querygen --config configs/querygen_microworld.yaml \\
        --mode-head runs/train/microworld_querygen/policy

Writes ``querygen_bench.json``, ``querygen_bench.md`` and ``recall.png`` under ``--out`` (default
``<out_dir>/bench``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FIXED = ("step", "content_words", "question_step", "info_need", "question")
HEAD_MODES = ("step", "content_words", "question_step", "info_need")


def fixed_queries(steps, mode: str) -> list[str]:
    from agents.query import QueryGenerator

    gen = QueryGenerator([mode])
    return [gen(s.step, {"question": s.question, "context": {"prior_steps": s.prior_steps}}, mode) for s in steps]


def mode_head_queries(policy: str, run_config: str | None, steps, eval_split: str,
                      artifact: str | None) -> tuple[list[str | None], dict[str, Any]]:
    """Queries of a trained QueryGen head: the env is driven along each chain (never retrieve) to the
    flagged step; the head picks a formulation from that observation. Steps the env does not reproduce
    exactly (text differs) get ``None`` and are counted."""
    from agents.query import QueryGenerator
    from envs.registration import make_env
    from policies.rl.export import LearnedTrigger

    trig = LearnedTrigger.load(policy, querygen=True)
    head_modes = QueryGenerator(list(HEAD_MODES))
    cfg_path = Path(run_config) if run_config else Path(policy).parent / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"mode head: the policy's training config {cfg_path} is missing (its env "
                                "settings define the observation); pass --mode-head-config")
    env_cfg = dict(json.loads(cfg_path.read_text()).get("env_config", {}))
    env_cfg.update(split=eval_split, cache_path=None, max_questions=None, querygen=True,
                   query_modes=list(HEAD_MODES))
    if artifact:
        env_cfg["artifact"] = artifact
    env = make_env("microworld", env_cfg)
    c = env.unwrapped.c
    index = {c.question_id(q): i for i, q in enumerate(c.questions)}
    out: list[str | None] = []
    picks: dict[str, int] = defaultdict(int)
    mismatched = 0
    for s in steps:
        obs, info = env.reset(seed=0, options={"question_index": index[s.qid]})
        for _ in range(len(s.prior_steps)):
            obs, _, term, trunc, info = env.step((0, 0))
            if term or trunc:
                break
        if info.get("step_text") != s.step:
            mismatched += 1
            out.append(None)
            continue
        _, probs = trig.probs(obs)
        mode = int(np.argmax(probs[: len(HEAD_MODES)]))
        picks[HEAD_MODES[mode]] += 1
        out.append(head_modes(s.step, {"question": s.question, "context": {"prior_steps": s.prior_steps}}, mode))
    return out, {"picks": dict(picks), "env_mismatch": mismatched}


def step_fixed(world, steps, passages: list[str | None]) -> list[float]:
    """Micro-world: is the step, regenerated with ``passages[i]`` injected (step mode), correct?"""
    from agents.reasoners.micro import MicroReasoner, MicroState
    from agents.reasoners.stepgen import GenState
    from envs.core.microworld.labels import label_step

    reasoner = MicroReasoner(world, capture_hidden=False)
    facts = {f.id: f for f in world.kb.facts}
    out = [0.0] * len(steps)
    todo = [i for i, p in enumerate(passages) if p is not None]
    for lo in range(0, len(todo), 64):
        idx = todo[lo: lo + 64]
        states = []
        for i in idx:
            s = steps[i]
            text = MicroReasoner._lines(s.question, (), tuple(s.prior_steps))
            states.append(MicroState(s.question, (), tuple(s.prior_steps), GenState(reasoner.tok.encode(text))))
        res = reasoner.regenerate(states, [[passages[i]] for i in idx], "step")
        for i, (step, _) in zip(idx, res):
            s = steps[i]
            fact = facts[s.gold_ids[0]]
            out[i] = float(label_step(world.kb, step.content, (fact.subject, fact.relation)).label == "correct")
    return out


def _per_question(steps, values: list[float]) -> tuple[list[str], np.ndarray]:
    groups: dict[str, list[float]] = defaultdict(list)
    for s, v in zip(steps, values):
        groups[s.qid].append(v)
    qids = sorted(groups)
    return qids, np.array([np.mean(groups[q]) for q in qids])


def run_bench(cfg, out: Path, mode_head: str | None = None, mode_head_config: str | None = None,
              n_boot: int = 10_000, batch1_n: int = 50, progress: bool = True) -> dict[str, Any]:
    """Run the benchmark for a QueryGen training config (see the module docstring)."""
    from policies.querygen.train import load_data, world_retriever

    _, held = load_data(cfg, progress)
    steps = [s for s in held if s.flagged]
    if not steps:
        raise ValueError(f"{cfg.world} {cfg.splits[1]}: no flagged held-out steps to benchmark")
    retriever = world_retriever(cfg.world, cfg.artifact, cfg.index_path)
    methods: dict[str, dict[str, Any]] = {}
    for m in FIXED:
        t0 = time.perf_counter()
        methods[m] = {"kind": "fixed", "queries": fixed_queries(steps, m),
                      "seconds_per_query": (time.perf_counter() - t0) / len(steps)}
    notes: list[str] = []
    if mode_head:
        _add_mode_head(methods, notes, cfg, mode_head, mode_head_config, steps)
    _add_generators(methods, notes, cfg, steps, batch1_n)
    world = None
    if cfg.world == "microworld":
        from envs.core.microworld.artifact import load_artifact

        world = load_artifact(cfg.artifact, threads=cfg.threads)
    for m in methods.values():
        _score_queries(m, steps, retriever, world)
    metrics = ("r1", "r3", "fixed") if world is not None else ("r1", "r3")
    result: dict[str, Any] = {"world": cfg.world, "split": cfg.splits[1], "n_steps": len(steps),
                              "retriever": type(retriever).__name__, "notes": notes, "methods": {}}
    _summarise(result, methods, steps, metrics, n_boot)
    out.mkdir(parents=True, exist_ok=True)
    from envs.core.io import write_json, write_text

    write_json(out / "querygen_bench.json", result)
    md = format_markdown(result)
    write_text(out / "querygen_bench.md", md)
    plot_recall(result, out / "recall.png")
    print(md)
    return result


def _add_mode_head(methods: dict[str, dict[str, Any]], notes: list[str], cfg, mode_head: str,
                   mode_head_config: str | None, steps: list) -> None:
    """The RLlib QueryGen policy's mode head as a method (micro-world only; skipped, with a note, without it)."""
    if cfg.world != "microworld":
        notes.append("mode head: only on the micro-world (the RLlib QueryGen policy is trained there)")
    elif not Path(mode_head).exists():
        notes.append(f"mode head: skipped, {mode_head} does not exist (train it with configs/experiments/microworld/train_microworld_querygen.yaml)")
    else:
        t0 = time.perf_counter()
        q, info = mode_head_queries(mode_head, mode_head_config, steps, cfg.splits[1], cfg.artifact)
        methods["mode head"] = {"kind": "learned head", "queries": q, "info": info,
                                "seconds_per_query": None}
        log.info("mode head: %s (%.0f s)", info, time.perf_counter() - t0)


def _add_generators(methods: dict[str, dict[str, Any]], notes: list[str], cfg, steps: list, batch1_n: int) -> None:
    """The SFT and RL generators as methods (each skipped, with a note, without its checkpoint): their queries,
    seconds per query batched and at batch 1."""
    from policies.querygen.model import META_FILE, GenerativeQueryGenerator

    for stage in ("sft", "rl"):
        folder = Path(cfg.out_dir) / stage
        if not (folder / META_FILE).is_file():
            notes.append(f"{stage} generator: skipped, no checkpoint at {folder}")
            continue
        gen = GenerativeQueryGenerator.load(folder, threads=cfg.threads)
        prompts = [gen.prompt(s.question, s.prior_steps, s.step) for s in steps]
        t0 = time.perf_counter()
        queries = gen.generate(prompts)
        batched = (time.perf_counter() - t0) / len(steps)
        t0 = time.perf_counter()
        for p in prompts[:batch1_n]:
            gen.generate([p])
        single = (time.perf_counter() - t0) / min(batch1_n, len(prompts))
        methods[f"generator ({stage.upper()})"] = {"kind": "generative", "queries": queries,
                                                   "seconds_per_query": batched, "seconds_per_query_batch1": single,
                                                   "checkpoint": str(folder)}


def _score_queries(m: dict[str, Any], steps: list, retriever, world) -> None:
    """A method's per-step Recall@1 / @3 of the gold passage, its mean query length and (micro-world) whether the
    top passage fixes the step."""
    from policies.querygen.rewards import gold_rank

    qs = m["queries"]
    live = [i for i, q in enumerate(qs) if q]
    hits = retriever.search([qs[i] for i in live], k=3) if live else []
    ranks: list[int | None] = [None] * len(steps)
    top: list[str | None] = [None] * len(steps)
    for i, h in zip(live, hits):
        ranks[i] = gold_rank(h, steps[i].gold_ids)
        top[i] = h[0].text if h else None
    m["r1"] = [float(r == 1) for r in ranks]
    m["r3"] = [float(r is not None and r <= 3) for r in ranks]
    m["tokens"] = float(np.mean([len((q or "").split()) for q in qs]))
    if world is not None:
        m["fixed"] = step_fixed(world, steps, top)


def _summarise(result: dict[str, Any], methods: dict[str, dict[str, Any]], steps: list, metrics: tuple[str, ...],
               n_boot: int) -> None:
    """Each method's row (per-question bootstrap CIs), the paired comparisons of the learned methods with their
    references, and the best fixed formulation per metric — into ``result``."""
    from eval.stats import bootstrap_mean_ci, paired_bootstrap

    qids = None
    for m_name, m in methods.items():
        row: dict[str, Any] = {"kind": m["kind"], "tokens": m["tokens"],
                               "seconds_per_query": m["seconds_per_query"],
                               "seconds_per_query_batch1": m.get("seconds_per_query_batch1"),
                               "examples": [q for q in m["queries"][:5]], **({"info": m["info"]} if "info" in m else {})}
        for k in metrics:
            qids, v = _per_question(steps, m[k])
            row[k] = bootstrap_mean_ci(v, n_resamples=n_boot, seed=0)
            m[f"{k}_q"] = v
        result["methods"][m_name] = row
    result["n_questions"] = len(qids or [])
    comps = []
    for gname in [n for n, m in methods.items() if m["kind"] in ("generative", "learned head")]:
        refs = [n for n, m in methods.items() if m["kind"] == "fixed"]
        refs += ["mode head"] if "mode head" in methods and gname != "mode head" else []
        refs += ["generator (SFT)"] if gname == "generator (RL)" and "generator (SFT)" in methods else []
        for ref in refs:
            for k in metrics:
                pb = paired_bootstrap(methods[gname][f"{k}_q"], methods[ref][f"{k}_q"], n_resamples=n_boot, seed=0)
                comps.append({"method": gname, "vs": ref, "metric": k, **pb})
    result["comparisons"] = comps
    result["best_fixed"] = {k: max((n for n, m in methods.items() if m["kind"] == "fixed"),
                                   key=lambda n: float(methods[n][f"{k}_q"].mean())) for k in metrics}


def _ci(d: dict[str, float]) -> str:
    return f"{d['mean']:.3f} [{d['lo']:.3f}, {d['hi']:.3f}]"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{1000 * x:.2f}"


def format_markdown(result: dict[str, Any]) -> str:
    has_fixed = any("fixed" in r for r in result["methods"].values())
    head = ["method", "kind", "Recall@1 [95% CI]", "Recall@3 [95% CI]"] + (["step fixed [95% CI]"] if has_fixed else []) \
        + ["query tokens", "ms / query (batched)", "ms / query (batch 1)", "example"]
    lines = [f"# QueryGen benchmark — {result['world']} {result['split']}", "",
             f"{result['n_steps']} flagged held-out steps of {result['n_questions']} questions; retriever "
             f"{result['retriever']}, top 3.", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for name, r in result["methods"].items():
        cells = [name, r["kind"], _ci(r["r1"]), _ci(r["r3"])] + ([_ci(r["fixed"])] if has_fixed else []) + [
            f"{r['tokens']:.1f}", _ms(r["seconds_per_query"]), _ms(r.get("seconds_per_query_batch1")),
            "`" + str(r["examples"][0] if r["examples"] else "") + "`"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Paired differences (question-level bootstrap, 10,000 resamples):", "",
              "| method | vs | metric | Δ [95% CI] | p |", "|---|---|---|---|---|"]
    for c in result["comparisons"]:
        lines.append(f"| {c['method']} | {c['vs']} | {c['metric']} | {c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] "
                     f"| {c['p_value']:.3g} |")
    for n in result["notes"]:
        lines.append(f"\n- {n}")
    if "mode head" in result["methods"]:
        lines.append(f"\n- mode head: {result['methods']['mode head']['info']}")
    return "\n".join(lines) + "\n"


def plot_recall(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["methods"])
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names)), 3.6))
    x = np.arange(len(names))
    for j, (k, lab) in enumerate((("r1", "Recall@1"), ("r3", "Recall@3"))):
        v = [result["methods"][n][k] for n in names]
        mean = np.array([d["mean"] for d in v])
        err = np.array([[d["mean"] - d["lo"] for d in v], [d["hi"] - d["mean"] for d in v]])
        ax.bar(x + (j - 0.5) * 0.38, mean, 0.38, yerr=err, capsize=2, label=lab)
    ax.set_xticks(x, names, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of flagged steps")
    ax.set_title(f"QueryGen: evidence recall ({result['world']}, n={result['n_questions']} questions)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def register(sub: Any) -> None:
    p = sub.add_parser("querygen", help="generative QueryGen vs fixed query formulations (Recall@1/@3, step fixed)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the QueryGen training config (world, out_dir, splits)")
    p.add_argument("--out", default=None, help="output folder (default: <out_dir>/bench)")
    p.add_argument("--mode-head", default=None, help="exported RLlib QueryGen policy (micro-world) to compare")
    p.add_argument("--mode-head-config", default=None, help="its training config.json (default: next to it)")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from policies.querygen.config import QueryGenTrainConfig

    cfg = QueryGenTrainConfig.from_yaml(args.config)
    out = Path(args.out) if args.out else Path(cfg.out_dir) / "bench"
    run_bench(cfg, out, args.mode_head, args.mode_head_config, args.n_boot, progress=not args.no_progress)
    return 0
