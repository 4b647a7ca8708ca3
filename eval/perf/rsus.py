"""``kairos bench rsus``: what RSUS costs on top of generation (docs/design.md §4).

For each reasoner (the micro-world LM on its test questions; SmolLM2-135M on HotpotQA dev questions), greedy
chains are generated step by step (batched, one torch thread) and every step is scored afterwards with RSUS
variants; the overhead of a variant is its CPU time over the CPU time of generating the same steps:

* ``ent`` — U_ent only: entity BM25-score entropy over the top 100 hits of the task's corpus;
* ``ent+cons@markers`` — plus U_cons (k = 3 sampled alternatives) only at steps with a discourse marker
  (so, therefore, because, …): the configuration the ≤ 15 % target is about;
* ``ent+cons@all`` — U_cons at every step.

U_verb is not timed here: asked of the model (``agents.reasoners.confidence``: a side turn after each step, hf /
vllm with a chat template, openai with api: chat) it is a generation whose tokens and seconds the env charges to the
step's cost (``info["verbal_confidence"]``); SmolLM2-135M states a usable number in most, not all, of its replies.
The learned proxy is a small MLP on surface features and a MiniLM sentence embedding. CPU time (``time.process_time``) is used because on a shared machine
wall-clock time measures the neighbours. Prints a table, writes ``rsus_bench.json``.

Example (shell)::

    kairos bench rsus --out runs/bench/rsus_bench.json
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

VARIANTS = {"ent": dict(w_cons=0.0), "ent+cons@markers": dict(cons_only_at_markers=True),
            "ent+cons@all": dict(cons_only_at_markers=False)}


def _chains(reasoner, questions: list[str], max_steps: int, batch: int) -> tuple[list[tuple[Any, Any]], float]:
    """``[(step, state before it)]`` of greedy chains, and the CPU seconds of generating them."""
    pairs: list[tuple[Any, Any]] = []
    cpu = 0.0
    for lo in range(0, len(questions), batch):
        states = [reasoner.start(q) for q in questions[lo: lo + batch]]
        for _ in range(max_steps):
            live = [s for s in states if not s.done]
            if not live:
                break
            t0 = time.process_time()
            res = reasoner.next_step(live)
            cpu += time.process_time() - t0
            nxt = iter(res)
            new_states = []
            for s in states:
                if s.done:
                    new_states.append(s)
                    continue
                step, after = next(nxt)
                if not step.is_answer:
                    pairs.append((step, s))
                new_states.append(after)
            states = new_states
    return pairs, cpu


def bench_reasoner(name: str, reasoner, questions: list[str], corpus_texts: list[str], max_steps: int,
                   batch: int) -> dict[str, Any]:
    from agents.signals.rsus import RSUS, BM25Scores, RSUSConfig, has_discourse_marker

    pairs, gen_cpu = _chains(reasoner, questions, max_steps, batch)
    scorer = BM25Scores(corpus_texts)
    row: dict[str, Any] = {"reasoner": name, "questions": len(questions), "steps": len(pairs),
                           "steps_with_marker": sum(has_discourse_marker(s.content) for s, _ in pairs),
                           "generation_cpu_s": round(gen_cpu, 3), "variants": {}}
    for vname, kw in VARIANTS.items():
        rsus = RSUS(RSUSConfig(w_verb=0.0, **kw), scorer=scorer, reasoner=reasoner)
        for step, state in pairs[:2]:  # warm-up (lazy imports, tokenizer caches) outside the timing
            rsus.components(step, state)
        t0 = time.process_time()
        n_cons = 0
        for step, state in pairs:
            comps = rsus.components(step, state)
            n_cons += comps["cons"] is not None
        cpu = time.process_time() - t0
        row["variants"][vname] = {"cpu_s": round(cpu, 3), "overhead": cpu / gen_cpu if gen_cpu else None,
                                  "steps_with_cons": n_cons}
    return row


def run_bench(out: str | Path | None, n_micro: int = 64, n_hotpot: int = 16, batch: int = 8,
              threads: int = 1) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    rows = []
    from agents.reasoners.micro import MicroReasoner
    from envs.core.microworld.artifact import load_artifact

    world = load_artifact(threads=threads)
    qs = [q.text for q in list(world.questions["test"])[:n_micro]]
    rows.append(bench_reasoner("micro-world LM", MicroReasoner(world, capture_hidden=False), qs,
                               [p.text for p in world.corpus()], max_steps=6, batch=batch))
    if n_hotpot:
        from agents.reasoners.hf import HFReasoner, HFReasonerConfig
        from envs.qa_task import QATask

        task = QATask("hotpotqa", f"dev[0:{n_hotpot}]")
        r = HFReasoner.from_config(HFReasonerConfig(max_step_tokens=32, max_steps=4, capture_hidden=False,
                                                    threads=threads))
        rows.append(bench_reasoner("SmolLM2-135M", r, [q.question for q in task.questions],
                                   [p.text for p in task.corpus()], max_steps=4, batch=batch))
    result = {"rows": rows, "threads": threads, "batch": batch}
    lines = ["| reasoner | steps (with marker) | generation CPU s | " + " | ".join(
        f"{v} overhead" for v in VARIANTS) + " |", "|---|---|---|" + "---|" * len(VARIANTS)]
    for r in rows:
        cells = [f"{100 * r['variants'][v]['overhead']:.1f} % ({r['variants'][v]['steps_with_cons']} cons)"
                 for v in VARIANTS]
        lines.append(f"| {r['reasoner']} | {r['steps']} ({r['steps_with_marker']}) | {r['generation_cpu_s']:.1f} | "
                     + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    result["table"] = table
    if out:
        from envs.core.io import write_json

        write_json(out, result)
    return result


def register(sub: Any) -> None:
    p = sub.add_parser("rsus", help="RSUS overhead over generation (U_ent, U_cons at markers / at all steps)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/bench/rsus_bench.json", help="JSON output path")
    p.add_argument("--n-micro", type=int, default=64, help="micro-world test questions")
    p.add_argument("--n-hotpot", type=int, default=16, help="HotpotQA questions for SmolLM2 (0: skip)")
    p.add_argument("--batch", type=int, default=8, help="questions generated together")
    p.set_defaults(func=lambda a: run_bench(a.out, a.n_micro, a.n_hotpot, a.batch) and 0)
