"""Calibration on dev and the runs that are more than one trigger on test.

* :func:`auto_grid` — a threshold trigger's grid: quantiles of its signal under CoT on dev;
* :data:`NEVER` — the never-fire point every threshold sweep starts with (the trigger never retrieves: CoT);
* :func:`calibrate` — sweep (query mode, threshold) on dev, keep the best reward (ties: fewer calls);
* :func:`select_learned` — model selection among a run's snapshots on dev;
* :func:`cache_oracle` — per question the best leaf of the decision tree at λ;
* :func:`average_seeds` — Random's per-question means over seeds.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from eval.bench.methods import tag

if TYPE_CHECKING:
    from eval.bench.methods import MethodSpec

log = logging.getLogger("eval.bench.policies")

QUANTILES = (0.01, 0.02, 0.05, 0.08, 0.12, 0.16, 0.2, 0.3, 0.4, 0.5, 0.7)
#: learned policies' retrieve-probability grid when ``calibrate`` is on and no ``thresholds`` are given
PROB_GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


#: the never-fire point of a threshold sweep, as the records (``summary.json``: ``threshold``, the calibration's
#: ``chosen``, ``grid``, ``sweep`` and ``curve``) and the result files' tags (``NAME@never``) hold it — a string, so
#: the files stay strict JSON (Python writes ±inf as ``Infinity``, which is not JSON); the trigger gets the threshold
#: no value crosses (:func:`signal_threshold`: −inf for ``below``, +inf for ``above``), so the row is CoT's
NEVER = "never"


def is_never(threshold: Any) -> bool:
    """Whether ``threshold`` is the never-fire point :data:`NEVER`."""
    return isinstance(threshold, str) and threshold == NEVER


def signal_threshold(threshold: float | str, direction: str) -> float:
    """The trigger's threshold of a sweep point: :data:`NEVER` is the one no value crosses (−inf for ``below``,
    +inf for ``above``: :class:`policies.triggers.ThresholdTrigger` then never fires).

    >>> signal_threshold(NEVER, "below"), signal_threshold(NEVER, "above"), signal_threshold(0.3, "below")
    (-inf, inf, 0.3)
    """
    if is_never(threshold):
        return -math.inf if direction == "below" else math.inf
    return float(threshold)


def threshold_label(threshold: float | str) -> str:
    """A sweep point in file tags and logs: ``never`` or the threshold to 6 significant digits."""
    return NEVER if is_never(threshold) else f"{float(threshold):.6g}"


def auto_grid(rows: list[dict], signal: str, direction: str) -> list[float]:
    """Thresholds at quantiles of ``signal`` over every step of ``rows`` (CoT episodes on dev), each nudged so it
    retrieves somewhere; never retrieving is the sweep's own point (:data:`NEVER`, added by the threshold method)."""
    vals = np.array([d["signals"][signal] for r in rows for d in r["decisions"] if signal in d.get("signals", {})],
                    dtype=float)
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return []
    qs = QUANTILES if direction == "below" else tuple(1.0 - q for q in QUANTILES)
    grid = sorted({float(np.quantile(vals, q)) for q in qs})
    # "below t" with t = min never fires: nudge so every grid point retrieves somewhere
    eps = 1e-9 * max(1.0, float(np.abs(vals).max()))
    return [g + eps if direction == "below" else g - eps for g in grid]


def retrieval_rate(rows: list[dict]) -> float:
    """Retrievals per decision (what a matched Random trigger needs)."""
    decisions = sum(len(r["decisions"]) for r in rows)
    return sum(r["calls"] for r in rows) / decisions if decisions else 0.0


def calibrate(m: MethodSpec, runner: Any, dev: range, grid: list[float | str], modes: list[str | None]
              ) -> tuple[dict, list[dict]]:
    """Sweep (mode, threshold) on dev: ``(best point, sweep)``, best by reward (ties: fewer calls; among equal
    calls the earlier point). The never-fire point :data:`NEVER` runs once, with no query mode (it retrieves
    nothing, so the mode is moot), before the others: it wins every exact tie at 0 calls."""
    points = ([(None, NEVER)] if any(is_never(t) for t in grid) else []) + [
        (mode, t) for mode in modes for t in grid if not is_never(t)]
    sweep = []
    for mode, t in points:
        r = runner.run(m.make_trigger(threshold=t), "dev", dev, tag=tag(m.name, mode, threshold_label(t)), env=m.env,
                       mode=mode, querygen=m.uses_querygen())
        sweep.append({"threshold": t, "mode": mode, "accuracy": r["accuracy"], "calls": r["calls_per_question"],
                      "reward": r["reward"]})
    return max(sweep, key=lambda s: (s["reward"], -s["calls"])), sweep


def snapshot_candidates(path: str | Path) -> list[Path]:
    """The exported policy at ``path`` plus its run's snapshots (``<run>/snapshots/iter_*``), oldest first."""
    path = Path(path)
    snaps = sorted((path.parent / "snapshots").glob("iter_*")) if (path.parent / "snapshots").is_dir() else []
    return [p for p in snaps if (p / "spec.json").is_file()] + [path]


def select_learned(m: Any, runner: Any, dev: range, test: range, calib: dict, mode: str | None = None
                   ) -> dict[str, Any]:
    """Evaluate every candidate export on dev, keep the best by reward at the policy's own training λ
    (``m.lam``; else the bench's) — ties: fewer calls — and run it on test."""
    lam = m.lam if m.lam is not None else runner.cfg.lambda_retrieval
    sweep = []
    for c in snapshot_candidates(m.path):
        spec = dataclasses.replace(m, path=str(c), select_on_dev=False)
        r = runner.run(spec.make_trigger(), "dev", dev, tag=tag(m.name, mode, f"{c.parent.name}_{c.name}"), env=m.env,
                       mode=mode, querygen=m.querygen)
        sweep.append({"path": str(c), "accuracy": r["accuracy"], "calls": r["calls_per_question"],
                      "reward": r["accuracy"] - lam * r["calls_per_question"]})
    best = max(sweep, key=lambda s: (s["reward"], -s["calls"]))
    calib[m.name] = {"candidates": sweep, "chosen": best["path"], "dev_reward": best["reward"]}
    log.info("%s: selected %s on dev (reward %.3f of %d candidates)", m.name, best["path"], best["reward"],
             len(sweep))
    spec = dataclasses.replace(m, path=best["path"], select_on_dev=False)
    res = runner.run(spec.make_trigger(), "test", test, tag=tag(m.name, mode, Path(best["path"]).name), env=m.env,
                     mode=mode, querygen=m.querygen)
    res["selected"] = best["path"]
    return res


def cache_oracle(runner: Any, questions: range, lam: float, max_leaves: int = 4096,
                 modes: list[str] | None = None) -> dict[str, Any]:
    """Per question, the best leaf of the decision tree at λ (:mod:`envs.oracle`, searched breadth first over all
    questions with batched generation and branch and bound at λ; replays hit the trajectory cache). ``modes``: each
    retrieval may use any of these query modes (the tree branches per mode; QueryGen actions, same cache namespace);
    None: the env's default mode."""
    from tqdm.auto import tqdm

    from envs.oracle import best_leaf, enumerate_leaves_batched
    from envs.vector import BatchedRetrievalEnv
    from train.evaluate import summarize_rows

    cfg = runner.env_config.replace(max_questions=max(questions.stop, runner.env_config.max_questions or 0),
                                    querygen=modes is not None)
    idx = [list(cfg.query_modes).index(m) for m in modes] if modes is not None else None
    venv = BatchedRetrievalEnv(runner.cfg.batch_size, cfg, components=runner.components)
    try:
        with tqdm(desc="test cache oracle (decision-tree search)", unit="leaf", leave=False) as bar:
            trees = enumerate_leaves_batched(venv, list(questions), max_leaves=max_leaves, progress=bar, modes=idx,
                                             prune_lambda=lam)
        rows = []
        env = venv.envs[0]
        for q in questions:
            leaf = best_leaf(trees[q], {"retrieval_calls": lam})
            _, info = env.reset(options={"question_index": q})
            rows.append({"question_index": q, "question_id": info["question_id"], "quality": leaf.quality,
                         "calls": leaf.calls, "reward": leaf.quality - lam * leaf.calls,
                         "steps": len(leaf.actions), "tokens": float("nan"), "seconds": float("nan"), "answer": None,
                         "truncated": False, "decisions": [{"action": list(a) if isinstance(a, tuple) else [a, 0]}
                                                           for a in leaf.actions],
                         "leaves": len(trees[q])})
    finally:
        venv.close()
    return {"policy": "cache oracle", "n": len(rows), **summarize_rows(rows), "episodes": rows}


def average_seeds(runs: list[dict[str, Any]], p: float) -> dict[str, Any]:
    """Per-question means over seeds (a paired comparison stays question-level); seed spread kept."""
    from train.evaluate import summarize_rows

    by_q: dict[int, list[dict]] = {}
    for r in runs:
        for e in r["episodes"]:
            by_q.setdefault(e["question_index"], []).append(e)
    rows = []
    for q in sorted(by_q):
        es = by_q[q]
        rows.append({**es[0], **{k: float(np.mean([e[k] for e in es]))
                                 for k in ("quality", "calls", "reward", "steps", "tokens", "seconds")},
                     "metrics": {k: float(np.mean([(e.get("metrics") or {}).get(k, 0.0) for e in es]))
                                 for k in (es[0].get("metrics") or {})},
                     "answer_status": None})
    return {"policy": runs[0]["policy"], "n": len(rows), **summarize_rows(rows), "episodes": rows, "p": p,
            "seed_accuracy": [r["accuracy"] for r in runs], "seed_calls": [r["calls_per_question"] for r in runs]}
