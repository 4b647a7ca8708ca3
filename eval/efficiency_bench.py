"""``kairos bench efficiency``: what the KV cache saves after an injection (issue 18's efficiency table, part 1).

When the env retrieves for a step it regenerates that step with the evidence appended after the accepted steps
(``injection: step``). A live reasoner state keeps the KV cache of its prefix, so only the evidence tokens are
prefilled before the first new token (**KV reuse**); a state rebuilt from its snapshot — a trajectory-cache replay,
a restarted replica — prefills the whole prefix again (**no reuse**). This benchmark measures both on the model's
own steps: greedy closed-book chains of the env's questions; for every step ``j ≥ 2`` (step 1's state has no
cache yet), the top-1 passage for the step's query (the env's default query mode) is injected into the live
state before it, and

* **TTFT**: wall time of the prefill plus the first generated token (batch 1, the env's hidden-state capture on),
* **step**: wall time of the whole regenerated step,

are timed with the cache (the live state) and without it (the same token ids, no cache), ``--repeats`` times
each in alternating order, median per state. The first token and the whole regenerated step must be identical
both ways (checked: the cache changes the cost, never the output). Prints a table, writes ``efficiency.json``.

Not measured here (issue 18, still open): speculative prefetch, attention-based compression, the per-call latency
table of CoT / Single RAG / IRCoT / FLARE / learned with each component on and off.

Example (shell)::

    kairos bench efficiency --out runs/bench/efficiency
    kairos bench efficiency --train-config configs/train_hotpotqa.yaml --questions 16 --out runs/bench/efficiency_smollm2
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("efficiency", help="KV-cache reuse after an injection: TTFT and step time with vs "
                                                 "without the prefix cache, on the model's own steps")
    p.add_argument("--train-config", default="configs/train_microworld.yaml",
                   help="a training config whose env (reasoner, task, corpus) is measured")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override an env field")
    p.add_argument("--questions", type=int, default=64, help="questions of the env's split (the first N)")
    p.add_argument("--max-steps", type=int, default=4, help="closed-book steps per chain")
    p.add_argument("--repeats", type=int, default=5, help="timings per state and variant (median)")
    p.add_argument("--out", default="runs/bench/efficiency", help="output folder")
    p.set_defaults(func=run)


def _pad_id(reasoner) -> int:
    pad = getattr(reasoner, "pad_id", None)
    return int(pad if pad is not None else reasoner.tok.pad_id)


def _setting(reasoner, name: str):
    """A generation setting of the micro-world reasoner (attribute) or the HF one (its config)."""
    return getattr(reasoner, name) if hasattr(reasoner, name) else getattr(reasoner.cfg, name)


def _generate(reasoner, gen, max_new_tokens: int):
    from agents.reasoners.stepgen import generate_steps

    t0 = time.perf_counter()
    out = generate_steps(reasoner.model, [gen], stop_ids=reasoner.stop_ids, header_end_id=None,
                         pad_id=_pad_id(reasoner), max_new_tokens=max_new_tokens,
                         capture_hidden=_setting(reasoner, "capture_hidden"))[0]
    return time.perf_counter() - t0, out.ids


def injection_states(comps, n_questions: int, max_steps: int) -> list[dict[str, Any]]:
    """Live states before each closed-book step ``j >= 2`` with the step's top-1 passage: ``[{before, evidence,
    prefix_tokens}]`` (the env's reasoner, query mode and retriever)."""
    r = comps.reasoner
    qs = comps.questions[:n_questions]
    states = [r.start(comps.question_text(q)) for q in qs]
    texts = [comps.question_text(q) for q in qs]
    pairs = []
    for j in range(1, max_steps + 1):
        live = [i for i, s in enumerate(states) if not s.done]
        if not live:
            break
        res = r.next_step([states[i] for i in live])
        for i, (step, after) in zip(live, res):
            if j >= 2 and not step.is_answer and states[i].gen is not None and states[i].gen.cache is not None:
                query = comps.querygen(step.text, {"question": texts[i]}, 0)
                hits = comps.retriever.search([query], k=1)[0]
                if hits:
                    pairs.append({"before": states[i], "evidence": hits[0].text,
                                  "prefix_tokens": len(states[i].gen.ids)})
            states[i] = after
    return pairs


def measure(comps, pairs: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    """TTFT and step time with and without the prefix's KV cache (see the module docstring)."""
    from agents.reasoners.stepgen import GenState

    r = comps.reasoner
    rows = []
    for p in pairs:
        reuse = r.with_evidence(p["before"], [p["evidence"]], "step").gen
        fresh = GenState(list(reuse.ids))  # what a replay or a restarted replica holds: the ids, no cache
        t: dict[str, list[float]] = {"ttft_reuse": [], "ttft_fresh": [], "step_reuse": [], "step_fresh": []}
        outs = {}
        for k in range(repeats):
            order = (("reuse", reuse), ("fresh", fresh)) if k % 2 == 0 else (("fresh", fresh), ("reuse", reuse))
            for name, gen in order:
                dt, first = _generate(r, gen, 1)
                t[f"ttft_{name}"].append(dt)
                dt, ids = _generate(r, gen, _setting(r, "max_step_tokens"))
                t[f"step_{name}"].append(dt)
                outs.setdefault(name, (first, ids))
        rows.append({"prefix_tokens": p["prefix_tokens"], "evidence_tokens": len(reuse.ids) - p["prefix_tokens"],
                     "cached_tokens": reuse.n_cached, "same_output": outs["reuse"] == outs["fresh"],
                     **{k: statistics.median(v) for k, v in t.items()}})
    n = len(rows)
    if not n:
        raise ValueError("no step >= 2 with a cached prefix and a retrieved passage: raise --questions / --max-steps")

    def mean(k):
        return sum(row[k] for row in rows) / n

    return {"states": n, "prefix_tokens_mean": mean("prefix_tokens"), "evidence_tokens_mean": mean("evidence_tokens"),
            "same_output": sum(row["same_output"] for row in rows),
            "ttft_reuse_ms": 1000 * mean("ttft_reuse"), "ttft_fresh_ms": 1000 * mean("ttft_fresh"),
            "ttft_ratio": mean("ttft_reuse") / mean("ttft_fresh"),
            "step_reuse_ms": 1000 * mean("step_reuse"), "step_fresh_ms": 1000 * mean("step_fresh"),
            "step_ratio": mean("step_reuse") / mean("step_fresh"), "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    m = result["kv_reuse"]
    return "\n".join([
        f"KV-cache reuse after an injection ({result['reasoner']}, {m['states']} states of steps >= 2, batch 1, "
        f"median of {result['repeats']}):", "",
        "| prefix tokens | evidence tokens | TTFT reuse (ms) | TTFT no reuse (ms) | TTFT ratio | step reuse (ms) | "
        "step no reuse (ms) | step ratio | same output |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {m['prefix_tokens_mean']:.0f} | {m['evidence_tokens_mean']:.0f} | {m['ttft_reuse_ms']:.2f} | "
        f"{m['ttft_fresh_ms']:.2f} | **{m['ttft_ratio']:.2f}** | {m['step_reuse_ms']:.2f} | {m['step_fresh_ms']:.2f} | "
        f"{m['step_ratio']:.2f} | {m['same_output']}/{m['states']} |",
        "", "Target (issue 18): TTFT after injection with KV reuse <= 0.6x without."])


def run(args: argparse.Namespace) -> int:
    import json

    import torch

    from envs.components import build_components
    from envs.env_config import EnvConfig
    from envs.io import write_json, write_text
    from eval.service_bench import train_env_config

    torch.set_num_threads(1)
    comps = build_components(EnvConfig.from_dict(train_env_config(args)))
    log.info("efficiency bench: %s, %d questions", comps.config.reasoner, args.questions)
    pairs = injection_states(comps, args.questions, args.max_steps)
    if pairs:  # warm-up outside the timing (lazy inits, allocator)
        measure(comps, pairs[:1], 1)
    result = {"train_config": args.train_config, "overrides": args.set, "reasoner": comps.config.reasoner,
              "questions": args.questions, "repeats": args.repeats, "threads": torch.get_num_threads(),
              "kv_reuse": measure(comps, pairs, args.repeats)}
    out = Path(args.out)
    write_json(out / "efficiency.json", result)
    md = markdown(result)
    write_text(out / "efficiency.md", md)
    print(md)
    print(json.dumps({k: v for k, v in result["kv_reuse"].items() if k != "rows"}, indent=1))
    return 0
