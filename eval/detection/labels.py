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

    python -m eval.detection.labels --config configs/bench_hotpotqa_bm25.yaml --split "dev[0:500:2]" \\
        --out runs/labels/hotpotqa_benefit.jsonl --max-minutes 45 --workers 2
"""

from __future__ import annotations

import argparse
import glob
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
        max_minutes: float | None = None, progress: bool = True, workers: int = 1) -> dict[str, Any]:
    """Label questions of ``env_config``'s split (an :class:`~envs.env_config.EnvConfig`, or its dict) until done,
    ``max_questions`` or ``max_minutes``. ``workers`` > 1 labels the questions left in that many processes (one
    CPU and one reasoner each; question ``k`` of the list left goes to process ``k mod workers``, so a time budget
    stops every process at about the same question index), each writing its own ``<out>.shard<i>`` file, merged
    into ``out`` when they finish — or by the next run, if one was killed. A question's label does not depend on the
    process that made it (tested): the trajectory cache (sqlite) is shared by all of them."""
    from envs.env_config import EnvConfig

    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
    cfg = env_config if isinstance(env_config, EnvConfig) else EnvConfig.from_dict(dict(env_config))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from envs.core.runlock import output_lock

    with output_lock(out):  # one run per output file: a second would merge (and remove) the first one's live shards
        return _run(cfg, out, max_questions, max_minutes, progress, workers)


def _run(cfg, out: Path, max_questions, max_minutes, progress: bool, workers: int) -> dict[str, Any]:
    from envs.registration import make_env

    rows_done = _merge_shards(out)
    env = make_env(None, cfg)  # the driver's too: the split's questions (and its config checked) before any worker starts
    n = len(env.unwrapped.c.questions[: cfg.max_questions or None])  # the env's questions
    n = n if max_questions is None else min(max_questions, n)
    todo = [qi for qi in range(n) if qi not in rows_done]
    t0 = time.perf_counter()
    if workers == 1 or len(todo) <= 1:
        new = _label_into(env, todo, out, max_minutes, progress, initial=n - len(todo), total=n)
    else:
        from train.warmstart import map_shards

        env.close()  # the driver only counted the questions: its reasoner's memory goes back before the workers load theirs
        del env
        shards = [todo[i::workers] for i in range(min(workers, len(todo)))]
        log.info("benefit labels: %d questions left in %d processes", len(todo), len(shards))
        new = sum(map_shards(_label_shard, [(cfg.to_dict(), shard, str(_shard_path(out, i)), max_minutes,
                                              progress and i == 0) for i, shard in enumerate(shards)]))
        _merge_shards(out)
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()] if out.is_file() else []
    steps = [s for r in rows for s in r["steps"]]
    summary = {"questions": len(rows), "steps": len(steps),
               "helped": sum(s["benefit"] > 0 for s in steps), "hurt": sum(s["benefit"] < 0 for s in steps),
               "seconds_new": round(time.perf_counter() - t0, 1), "new_questions": new}
    log.info("benefit labels: %s -> %s", summary, out)
    return summary


def _shard_path(out: Path, i: int) -> Path:
    return out.with_name(f"{out.name}.shard{i}")


def _merge_shards(out: Path) -> dict[int, dict[str, Any]]:
    """``out``'s finished rows with those of any ``<out>.shard<i>`` files (a multi-process run's, finished or
    killed) merged in, ordered by question; written back atomically, the shard files removed after."""
    from envs.core.io import read_done_rows, write_text

    rows = read_done_rows(out)
    shards = sorted(out.parent.glob(f"{glob.escape(out.name)}.shard*"))  # a name may hold [ ] (a split)
    for sp in shards:
        for qi, row in read_done_rows(sp).items():
            rows.setdefault(qi, row)
    if rows or shards:  # rewrite without a torn tail, atomically, before anyone appends
        write_text(out, "".join(json.dumps(rows[q]) + "\n" for q in sorted(rows)))
    for sp in shards:
        sp.unlink()
    return rows


def _label_into(env, questions: list[int], path: Path, max_minutes: float | None, progress: bool,
                initial: int = 0, total: int | None = None) -> int:
    """Label ``questions`` in order, one fsync-ed JSON line each appended to ``path``; stop starting new ones after
    ``max_minutes``. Returns how many were labelled."""
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    new = 0
    with open(path, "a", encoding="utf-8") as fh, tqdm(total=total if total is not None else len(questions),
                                                        initial=initial, desc="benefit labels",
                                                        disable=not progress) as bar:
        for qi in questions:
            if max_minutes is not None and time.perf_counter() - t0 > 60 * max_minutes:
                log.info("time budget reached after %d new questions", new)
                break
            row = label_question(env, qi)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            new += 1
            bar.update(1)
    return new


def _label_shard(cfg: dict, questions: list[int], path: str, max_minutes: float | None, progress: bool) -> int:
    """One process of a multi-process run: its own env (reasoner), its questions into its own file."""
    from envs.registration import make_env

    return _label_into(make_env(None, cfg), questions, Path(path), max_minutes, progress)


#: training-free signals ranked against the labels, each in its own declared error direction
#: (``agents.signals.base.signal_meta``: higher score = retrieve after the sign)
RANKED_SIGNALS = ("minprob", "maxprob", "ppl", "entropy", "rsus", "u_ent", "u_verb", "u_cons")


def summarize(path: str | Path, n_boot: int = 1000) -> dict[str, Any]:
    """Label statistics and how well each training-free signal ranks the steps that retrieval helps
    (AUROC of ``benefit > 0`` with a question-level bootstrap CI). A signal masked on some steps (U_verb where the
    model's reply held no number) is ranked on the steps that have it: ``n`` and ``coverage`` say how many."""
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
            has = np.array([s["signals"].get(name) is not None for _, s in steps])
            if not 0 < y[has].sum() < has.sum():  # absent, or one class only among the steps that have it
                continue
            score = sign * np.asarray([s["signals"][name] for (_, s), h in zip(steps, has) if h], dtype=float)
            lo, hi = bootstrap_auroc_ci(y[has], score, groups=groups[has], n_boot=n_boot)
            out["auroc"][name] = {"auroc": auroc(y[has], score), "ci": [lo, hi], "n": int(has.sum()),
                                  "coverage": float(has.mean())}
    return out


def main(argv: list[str] | None = None) -> int:
    from envs.env_config import env_config_from_file

    p = argparse.ArgumentParser(prog="python -m eval.detection.labels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a bench or env YAML; its 'env' section (or the whole file) is "
                                                   "the EnvConfig")
    p.add_argument("--split", default=None, help="override the env split, e.g. 'dev[0:500:2]'")
    p.add_argument("--out", required=True, help="JSONL output (appended; reruns resume)")
    p.add_argument("--max-questions", type=int, default=None)
    p.add_argument("--max-minutes", type=float, default=None, help="stop starting new questions after this long")
    p.add_argument("--workers", type=int, default=1, help="labelling processes (one CPU and one reasoner each; the "
                                                           "labels are the same for any number)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--summarize", action="store_true", help="only summarise --out (labels, signal AUROCs)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if args.summarize:
        print(json.dumps(summarize(args.out), indent=1))
        return 0
    env_cfg = env_config_from_file(args.config, args.split)
    if args.workers < 1:
        p.error(f"--workers: expected an integer >= 1, got {args.workers}")
    print(json.dumps(run(env_cfg, args.out, args.max_questions, args.max_minutes, not args.no_progress, args.workers)))
    return 0


if __name__ == "__main__":
    from envs.core.cli_errors import run_handled

    raise SystemExit(run_handled("python -m eval.detection.labels", main))
