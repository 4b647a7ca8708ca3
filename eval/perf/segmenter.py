"""``kairos bench segmenter``: boundary F1 of the learned step segmenter, in and out of domain.

Chains whose boundaries we know, with their ``Step N:`` markers removed (:mod:`agents.boundary`):

* **micro-world** — the shipped world LM's greedy chains (steps and the answer line) on train questions
  (training) and test questions (evaluation);
* **SmolLM2** — SmolLM2-135M-Instruct's chains on real questions, read from files Kairos already wrote
  (``kairos bench policies`` per-question JSONL: steps + answer; ``kairos train querygen`` HotpotQA step files)
  or, when none is found, generated here (``--generate N`` HotpotQA questions, 4 steps each); split by
  question (a hash of the id) into train / test halves.

Three segmenters are trained — on micro-world only, SmolLM2 only, both — and each is scored on both test
sets (precision / recall / F1 of exact boundary positions; the chain's first token is not scored), next to
the rule "a step starts after every sentence end". Writes ``segmenter_bench.json`` / ``.md`` under ``--out``
and saves the "both" segmenter under ``<out>/segmenter``.

Example (shell)::

    kairos bench segmenter --out runs/bench/segmenter
"""

from __future__ import annotations

import argparse
import functools
import glob
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: SmolLM2 chains Kairos already wrote: the HotpotQA benchmarks' CoT episodes (not ``policies_*``: the micro-world
#: benchmarks write the same files, and their chains are the micro-world LM's) and QueryGen's HotpotQA step files
DEFAULT_SOURCES = ("runs/bench/policies_hotpotqa*/per_question/*/CoT.jsonl", "runs/querygen/hotpotqa/data/steps_*.jsonl")


def microworld_chains(split: str, n: int, artifact: str | None = None) -> list[list[str]]:
    from agents.reasoners.micro import MicroReasoner
    from envs.core.microworld.artifact import load_artifact

    world = load_artifact(artifact)
    qs = list(world.questions[split])[:n]
    chains = MicroReasoner(world, capture_hidden=False).run_chains([q.text for q in qs], max_steps=6)
    return [[s.text for s in c] for c in chains]


def chains_from_files(patterns: list[str]) -> dict[str, list[str]]:
    """``question id -> step lines`` from bench per-question JSONL (steps + answer) or QueryGen step files."""
    out: dict[str, list[str]] = {}
    for pat in patterns:
        for path in sorted(glob.glob(pat)):
            with open(path, encoding="utf-8") as fh:
                for i, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{i}: not JSON ({e})") from None
                    if "decisions" in row:  # kairos bench policies
                        lines = [d["step"] for d in row["decisions"] if d.get("step")]
                        key = f"{Path(path).parts[-4] if len(Path(path).parts) >= 4 else path}:{row['question_id']}"
                        if lines:
                            out.setdefault(key, lines)
                    elif "prior_steps" in row:  # QueryGen flagged steps: keep the longest chain per question
                        lines = [*row["prior_steps"], row["step"]]
                        key = f"querygen:{row['qid']}"
                        if len(lines) > len(out.get(key, [])):
                            out[key] = lines
    return out


def generate_smollm2_chains(n: int) -> dict[str, list[str]]:
    from agents.reasoners.hf import HFReasoner, HFReasonerConfig
    from envs.qa_task import QATask

    task = QATask("hotpotqa", f"dev[0:{n}]")
    r = HFReasoner.from_config(HFReasonerConfig(max_step_tokens=32, max_steps=5, capture_hidden=False))
    chains = r.run_chains([q.question for q in task.questions], max_steps=5)
    return {f"gen:{q.id}": [s.text for s in c] for q, c in zip(task.questions, chains)}


def _predict(seg, toks) -> list[int]:
    """The segmenter's 0/1 boundaries (the first token always starts a step)."""
    return [1] + [int(p >= seg.threshold) for p in seg.token_probs(toks)[1:]]


#: the segmenter size docs/design.md §4 specifies (the default, agents.boundary.SegmenterConfig, is 2 layers × 64)
PAPER_SIZE = {"d_model": 256, "n_layers": 3, "n_heads": 4, "ff_dim": 1024}
PAPER_NAME = "both (3 × 256, 4 heads)"


def _half(key: str) -> int:
    return hashlib.sha256(key.split(":", 1)[-1].encode()).digest()[0] % 2


def run_bench(out: Path, n_micro_train: int = 2000, n_micro_test: int = 400, sources: list[str] | None = None,
              generate: int = 100, epochs: int = 8, seed: int = 0, paper_size: bool = False) -> dict[str, Any]:
    import numpy as np

    from agents.boundary import boundary_scores, chain_example, sentence_start_baseline, train_segmenter
    from envs.core.io import write_json, write_text

    t0 = time.perf_counter()
    micro_train = [chain_example(c) for c in microworld_chains("train", n_micro_train)]
    micro_test = [chain_example(c) for c in microworld_chains("test", n_micro_test)]
    smol = chains_from_files(list(sources or DEFAULT_SOURCES))
    origin = "files"
    if not smol:
        smol, origin = generate_smollm2_chains(generate), f"generated ({generate} HotpotQA questions)"
    smol_train = [chain_example(v) for k, v in sorted(smol.items()) if _half(k) == 0]
    smol_test = [chain_example(v) for k, v in sorted(smol.items()) if _half(k) == 1]
    data_s = time.perf_counter() - t0
    tests = {"micro-world": micro_test, "SmolLM2": smol_test}
    result: dict[str, Any] = {"data": {
        "micro_train_chains": len(micro_train), "micro_test_chains": len(micro_test),
        "smollm2_train_chains": len(smol_train), "smollm2_test_chains": len(smol_test), "smollm2_source": origin,
        "test_boundaries": {k: int(sum(sum(y[1:]) for _, y in v)) for k, v in tests.items()},
        "seconds": round(data_s, 1)}, "rows": []}

    def score(pred_fn, chains) -> dict[str, float]:
        tot = {"tp": 0.0, "pred": 0.0, "gold": 0.0}
        for toks, y in chains:
            s = boundary_scores(pred_fn(toks), y)
            for k in tot:
                tot[k] += s[k]
        p = tot["tp"] / tot["pred"] if tot["pred"] else 0.0
        r = tot["tp"] / tot["gold"] if tot["gold"] else 0.0
        return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}

    from agents.boundary import SegmenterConfig

    runs = [("micro-world", micro_train, None), ("SmolLM2", smol_train, None), ("both", micro_train + smol_train, None)]
    if paper_size:  # the size docs/design.md §4 specifies, on the same data: is the small default's F1 the same?
        runs.append((PAPER_NAME, micro_train + smol_train, SegmenterConfig(**PAPER_SIZE)))
    for name, tr, size in runs:
        t1 = time.perf_counter()
        seg = train_segmenter(tr, size, epochs=epochs, seed=seed)
        train_s = time.perf_counter() - t1
        for test_name, te in tests.items():
            s = score(functools.partial(_predict, seg), te)
            domain = "in" if name in (test_name, "both", PAPER_NAME) else "out"
            result["rows"].append({"trained_on": name, "tested_on": test_name, "domain": domain, **s,
                                   "train_seconds": round(train_s, 1)})
        if name == "both":
            seg.save(out / "segmenter", trained_on=["micro-world", "SmolLM2"], epochs=epochs, seed=seed)
    for test_name, te in tests.items():
        result["rows"].append({"trained_on": "rule: sentence ends", "tested_on": test_name, "domain": "–",
                               **score(sentence_start_baseline, te), "train_seconds": 0.0})
    result["mean_tokens_per_chain"] = {k: float(np.mean([len(t) for t, _ in v])) for k, v in tests.items()}
    lines = ["# Learned step segmenter — boundary F1", "",
             f"Test chains: micro-world {len(micro_test)}, SmolLM2 {len(smol_test)} (source: {origin}); "
             f"boundaries scored: {result['data']['test_boundaries']}.", "",
             "| trained on | tested on | domain | precision | recall | F1 | train s |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['trained_on']} | {r['tested_on']} | {r['domain']} | {r['precision']:.3f} | "
                     f"{r['recall']:.3f} | {r['f1']:.3f} | {r['train_seconds']:.1f} |")
    md = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "segmenter_bench.json", result)
    write_text(out / "segmenter_bench.md", md)
    print(md)
    return result


def register(sub: Any) -> None:
    p = sub.add_parser("segmenter", help="learned step-boundary segmenter: boundary F1 in and out of domain",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/bench/segmenter", help="output folder")
    p.add_argument("--micro-train", type=int, default=2000, help="micro-world training questions")
    p.add_argument("--micro-test", type=int, default=400, help="micro-world test questions")
    p.add_argument("--source", action="append", default=None,
                   help=f"glob of SmolLM2 chain files (repeatable; default: {', '.join(DEFAULT_SOURCES)})")
    p.add_argument("--generate", type=int, default=100, help="HotpotQA questions to generate when no file is found")
    p.add_argument("--epochs", type=int, default=8, help="training epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--paper-size", action="store_true", help="also train the specified size (3 layers × 256, 4 "
                                                             "heads) on both domains and score it")
    p.set_defaults(func=lambda a: run_bench(Path(a.out), a.micro_train, a.micro_test, a.source, a.generate,
                                            a.epochs, a.seed, a.paper_size) and 0)
