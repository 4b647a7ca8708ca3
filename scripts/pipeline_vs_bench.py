"""Does ``kairos.Pipeline`` repeat what a benchmark evaluated? Per test question: the same decisions (retrieve?,
query mode), queries, injected passages, calls and answers as the benchmark's per-question rows.

    python scripts/pipeline_vs_bench.py --bench runs/quickstart/bench --method "learned[QueryGen](λ=0.1)"

(after ``make quickstart``). Exits 1 when a question differs, listing it. ``--limit N`` checks the first N.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

log = logging.getLogger("pipeline_vs_bench")


def bench_view(row: dict) -> tuple:
    return (row["calls"], row["answer"], row["answer_status"],
            [(d["action"][0], d["action"][1], d["query"] if d["action"][0] else None,
              list(d["passage_ids"]) if d["action"][0] else []) for d in row["decisions"]])


def pipeline_view(a) -> tuple:
    return (a.calls, a.answer_line, a.answer_status,
            [(int(s.retrieved), s.action[1] if isinstance(s.action, list) else 0, s.query,
              [p.id for p in s.passages if p.injected]) for s in a.steps])


def question_texts(env: dict) -> dict[str, str]:
    """Question id -> text of the benchmark env's split."""
    from envs.env_config import EnvConfig

    cfg = EnvConfig.from_dict(env)
    if cfg.task == "microworld":
        from envs.core.microworld.artifact import load_artifact
        from envs.microworld.task import MicroWorldTask

        task = MicroWorldTask(load_artifact(cfg.artifact, with_model=False), cfg.split, cfg.fact_holdout or None)
    else:
        from envs.qa_task import QATask

        task = QATask(cfg.task, cfg.split, cfg.data_path)
    return {task.question_id(q): task.question_text(q) for q in task.questions}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", required=True, help="the benchmark's output directory")
    ap.add_argument("--method", required=True, help="a method name of it")
    ap.add_argument("--limit", type=int, default=None, help="check the first N test questions only")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from kairos import Pipeline

    out = Path(args.bench)
    summary = json.loads((out / "summary.json").read_text())
    rows_file = (summary["methods"].get(args.method) or {}).get("per_question")
    if not rows_file:
        raise SystemExit(f"{out}/summary.json names no per-question file for '{args.method}' (a benchmark from "
                         "before it recorded them: rerun it, finished questions are reused)")
    rows = sorted((json.loads(x) for x in Path(rows_file).read_text().splitlines()), key=lambda r: r["question_index"])
    rows = rows[: args.limit] if args.limit else rows
    texts = question_texts(json.loads((out / "config.json").read_text())["env"])
    t0 = time.perf_counter()
    with Pipeline.from_bench(out, args.method) as p:
        answers = p.answer_many([texts[r["question_id"]] for r in rows])
    bad = [(r, a) for r, a in zip(rows, answers) if bench_view(r) != pipeline_view(a)]
    n = len(rows)
    print(f"{args.method}: {n - len(bad)}/{n} test questions identical (decisions, queries, passages, calls, answers); "
          f"pipeline {time.perf_counter() - t0:.1f} s; calls/q {sum(a.calls for a in answers) / n:.3f} "
          f"(bench {sum(r['calls'] for r in rows) / n:.3f})")
    for r, a in bad[:10]:
        print(f"  question {r['question_index']} ({r['question_id']}):\n    bench    {bench_view(r)}\n"
              f"    pipeline {pipeline_view(a)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
