"""Retrieval-benefit step labels (docs/design.md §6): for real data, where no step can be checked against a KB.

For each question the env (any task; the real-data default is SmolLM2-135M on HotpotQA with BM25) runs the
closed-book chain (never retrieve) and, for every non-answer step ``i`` of it, the episode that retrieves at step
``i`` only (the flagged step is regenerated with the evidence, nothing else changes). The label of step ``i`` is
``benefit_i = quality(retrieve at i) − quality(never)`` (answer F1 on HotpotQA); a step "needs retrieval" when
``benefit_i > 0``. All generations go through the env's trajectory cache (``cache_path``), so the runs are paid
once: the n + 1 episodes share their prefixes, a rerun reads them back, and probes trained later read the
same records (signals and PUlSE features included).

One JSON line per finished question (resumable: a rerun skips questions already in the file; a torn last line
is rewritten)::

    {"question_index", "question_id", "quality_never", "steps": [{"index", "text", "quality_retrieve",
     "benefit", "signals"}], "seconds"}

Example (shell)::

    python -m eval.benefit_labels --config configs/bench_hotpotqa_bm25.yaml --split "dev[0:500:2]" \\
        --out runs/labels/hotpotqa_benefit.jsonl --max-minutes 45
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _episode(env, qi: int, retrieve_at: int | None) -> tuple[float, list[dict[str, Any]]]:
    """Run one episode (retrieve only at step ``retrieve_at``, 1-based); returns (quality, decided steps)."""
    obs, info = env.reset(options={"question_index": qi})
    steps: list[dict[str, Any]] = []
    k = 0
    while True:
        k += 1
        steps.append({"index": k, "text": info["step_text"], "is_answer": info.get("is_answer", False),
                      "signals": info.get("signals", {})})
        action = int(retrieve_at == k)
        obs, _, term, trunc, info = env.step(action)
        if term or trunc:
            return float(info.get("quality", 0.0)), steps


def label_question(env, qi: int) -> dict[str, Any]:
    """The never-retrieve chain and the benefit of retrieving at each of its non-answer steps."""
    t0 = time.perf_counter()
    q_never, steps = _episode(env, qi, None)
    out = []
    for s in steps:
        if s["is_answer"]:
            continue
        q_i, _ = _episode(env, qi, s["index"])
        out.append({"index": s["index"], "text": s["text"], "quality_retrieve": q_i, "benefit": q_i - q_never,
                    "signals": {k: float(v) for k, v in s["signals"].items()}})
    c = env.unwrapped.c
    return {"question_index": qi, "question_id": c.question_id(c.questions[qi]), "quality_never": q_never,
            "steps": out, "seconds": round(time.perf_counter() - t0, 2)}


def run(env_config, out: str | Path, max_questions: int | None = None,
        max_minutes: float | None = None, progress: bool = True) -> dict[str, Any]:
    """Label questions of ``env_config``'s split (an :class:`~envs.env_config.EnvConfig`, or its dict) until done,
    ``max_questions`` or ``max_minutes``."""
    from tqdm.auto import tqdm

    from envs.core.io import read_done_rows, write_text
    from envs.registration import make_env

    env = make_env(None, env_config)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows_done = read_done_rows(out)
    done = set(rows_done)
    if rows_done:  # rewrite without a torn tail, atomically, before appending
        write_text(out, "".join(json.dumps(rows_done[q]) + "\n" for q in sorted(rows_done)))
    n = len(env.unwrapped.c.questions[: env.unwrapped.config.max_questions or None])  # the env's questions
    n = n if max_questions is None else min(max_questions, n)
    t0 = time.perf_counter()
    new = 0
    with open(out, "a", encoding="utf-8") as fh, tqdm(total=n, initial=len(done & set(range(n))),
                                                       desc="benefit labels", disable=not progress) as bar:
        for qi in range(n):
            if qi in done:
                continue
            if max_minutes is not None and time.perf_counter() - t0 > 60 * max_minutes:
                log.info("time budget reached after %d new questions", new)
                break
            row = label_question(env, qi)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            new += 1
            bar.update(1)
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    steps = [s for r in rows for s in r["steps"]]
    summary = {"questions": len(rows), "steps": len(steps),
               "helped": sum(s["benefit"] > 0 for s in steps), "hurt": sum(s["benefit"] < 0 for s in steps),
               "seconds_new": round(time.perf_counter() - t0, 1), "new_questions": new}
    log.info("benefit labels: %s -> %s", summary, out)
    return summary


#: training-free signals ranked against the labels, each in its own declared error direction
#: (``agents.signals.base.signal_meta``: higher score = retrieve after the sign)
RANKED_SIGNALS = ("minprob", "maxprob", "ppl", "entropy", "rsus", "u_ent")


def summarize(path: str | Path, n_boot: int = 1000) -> dict[str, Any]:
    """Label statistics and how well each training-free signal ranks the steps that retrieval helps
    (AUROC of ``benefit > 0`` with a question-level bootstrap CI)."""
    import numpy as np

    from eval.stats import auroc, bootstrap_auroc_ci

    rows = [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
    steps = [(r["question_index"], s) for r in rows for s in r["steps"]]
    if not steps:
        raise ValueError(f"{path}: no labelled steps")
    y = np.array([s["benefit"] > 0 for _, s in steps], dtype=int)
    groups = np.array([q for q, _ in steps])
    out: dict[str, Any] = {"questions": len(rows), "steps": len(steps), "helped": int(y.sum()),
                           "hurt": int(sum(s["benefit"] < 0 for _, s in steps)),
                           "mean_quality_never": float(np.mean([r["quality_never"] for r in rows])),
                           "mean_best_single_retrieval": float(np.mean(
                               [max([r["quality_never"]] + [s["quality_retrieve"] for s in r["steps"]]) for r in rows])),
                           "auroc": {}}
    if 0 < y.sum() < len(y):
        from agents.signals.base import signal_meta

        for name in RANKED_SIGNALS:
            sign = signal_meta(name)["error_direction"]
            vals = [s["signals"].get(name) for _, s in steps]
            if any(v is None for v in vals):
                continue
            score = sign * np.asarray(vals, dtype=float)
            lo, hi = bootstrap_auroc_ci(y, score, groups=groups, n_boot=n_boot)
            out["auroc"][name] = {"auroc": auroc(y, score), "ci": [lo, hi]}
    return out


def main(argv: list[str] | None = None) -> int:
    from envs.env_config import env_config_from_file

    p = argparse.ArgumentParser(prog="python -m eval.benefit_labels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a bench or env YAML; its 'env' section (or the whole file) is "
                                                   "the EnvConfig")
    p.add_argument("--split", default=None, help="override the env split, e.g. 'dev[0:500:2]'")
    p.add_argument("--out", required=True, help="JSONL output (appended; reruns resume)")
    p.add_argument("--max-questions", type=int, default=None)
    p.add_argument("--max-minutes", type=float, default=None, help="stop starting new questions after this long")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--summarize", action="store_true", help="only summarise --out (labels, signal AUROCs)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if args.summarize:
        print(json.dumps(summarize(args.out), indent=1))
        return 0
    env_cfg = env_config_from_file(args.config, args.split)
    print(json.dumps(run(env_cfg, args.out, args.max_questions, args.max_minutes, not args.no_progress)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
