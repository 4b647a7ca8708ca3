"""Greedy evaluation of a policy (a :class:`Trigger` or an exported learned policy) on chosen questions.

Runs one episode per question through :class:`envs.vector.BatchedRetrievalEnv` (generation batched across
the questions in flight; the trajectory cache makes reruns cheap) and reports accuracy (mean answer
quality), retrieval calls per question and reward (quality − Σ λ·cost with the env config's λ).

Example:
    >>> from policies.triggers import NeverTrigger
    >>> evaluate_policy(NeverTrigger(), {"split": "dev"}, [0, 1, 2])  # doctest: +SKIP
    {'policy': 'CoT', 'n': 3, 'accuracy': ..., 'calls_per_question': 0.0, 'reward': ...}
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def _as_trigger(policy: Any):
    if isinstance(policy, (str, Path)):
        from policies.rl.export import LearnedTrigger

        return LearnedTrigger.load(policy)
    if hasattr(policy, "decide"):
        return policy
    from policies.rl.export import LearnedTrigger
    from policies.rl.net import PolicyNet

    if isinstance(policy, PolicyNet):
        return LearnedTrigger(policy)
    raise TypeError(f"evaluate_policy: need a Trigger, a PolicyNet or an exported policy dir, got {type(policy)}")


def evaluate_policy(policy_or_trigger: Any, env_config: dict | Any, question_indices: list[int],
                    batch_size: int = 16, components=None, return_episodes: bool = False,
                    jsonl_path: str | Path | None = None, progress: str | None = None,
                    stop_at_step: int | None = None) -> dict[str, Any]:
    """Greedy episodes of ``policy_or_trigger`` on ``question_indices`` of ``env_config``'s split.

    Args:
        policy_or_trigger: a Trigger (``decide(obs, info)``), a :class:`policies.rl.net.PolicyNet`, or the
            directory of an exported policy. Each episode gets its own (shallow) copy, reset with the question
            index as seed, so results do not depend on batching or on resuming.
        env_config: :class:`envs.env_config.EnvConfig` (or a dict of its fields); its ``costs`` are the λ the
            reward uses. ``max_questions`` is lifted to cover the indices.
        question_indices: indices into the split's question list.
        batch_size: questions in flight at once (one batched generation call per round).
        components: prebuilt env components (reuse the model across calls).
        return_episodes: also return per-question rows.
        jsonl_path: append one row per finished question (decisions, signals, queries, passages, answer,
            costs, tokens, seconds); questions already in the file are not rerun (crash-resume).
        progress: a tqdm description to show a progress bar (None: no bar).
        stop_at_step: stop every episode once this step is generated, before the decision about it (nothing
            after it is generated; the row's ``quality`` is the task's partial quality of the lines written,
            ``truncated`` true, ``answer_status`` 'stopped'; :func:`envs.rollout.run_episodes`). ``None``: whole
            episodes. Keep the JSONL of such rows apart from whole episodes' (its resume reads any row as done).

    Returns:
        ``{"policy", "n", "accuracy", "calls_per_question", "reward", "steps_per_question",
        "tokens_per_question", "seconds_per_question"}`` (+ ``episodes``).
    """
    from envs.env_config import EnvConfig
    from envs.rollout import run_episodes
    from envs.vector import BatchedRetrievalEnv

    trigger = _as_trigger(policy_or_trigger)
    cfg = env_config if isinstance(env_config, EnvConfig) else EnvConfig.from_dict(env_config)
    if question_indices and cfg.max_questions is not None:
        cfg = cfg.replace(max_questions=max(cfg.max_questions, max(question_indices) + 1))
    jsonl = Path(jsonl_path) if jsonl_path is not None else None
    from envs.core.io import make_dir, read_done_rows, writing

    done = read_done_rows(jsonl)
    wanted = [int(q) for q in question_indices]
    todo = [q for q in wanted if q not in done]
    rows: list[dict[str, Any]] = [done[q] for q in wanted if q in done]
    sink = None
    if jsonl is not None:
        make_dir(jsonl.parent)
        if done:  # rewrite without a torn tail, atomically, before appending
            from envs.core.io import write_text

            write_text(jsonl, "".join(json.dumps(done[q]) + "\n" for q in sorted(done)))
        with writing(jsonl):
            sink = open(jsonl, "a")

    def sync() -> None:
        with writing(jsonl):
            os.fsync(sink.fileno())
    bar = None
    if progress is not None and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(wanted), initial=len(wanted) - len(todo), desc=progress, unit="q", leave=False)
    venv = BatchedRetrievalEnv(min(batch_size, max(1, len(todo))), cfg, components=components) if todo else None
    lam = (venv.envs[0].get_cost_weights() if venv is not None
           else {k: float(v) for k, v in cfg.costs.items()})
    try:
        if venv is not None:  # a learned policy fits this env (fields, sizes, query modes) before the first episode
            from policies.rl.compat import check_policy_env

            check_policy_env(trigger, venv.single_observation_space, cfg)
        # the one decision loop (envs.rollout: also what kairos.Pipeline runs); a row per finished question
        for ev in run_episodes(venv.envs if venv is not None else [], trigger, todo,
                               after_batch=sync if sink is not None else None, stop_at_step=stop_at_step):
            if ev.done:
                row = _row(ev.question_index, ev.next_info, ev.episode_return, ev.decision,
                           truncated=bool(ev.truncated and not ev.terminated))
                rows.append(row)
                if sink is not None:
                    with writing(jsonl):  # a full disk: one line naming the file, the rows before it kept
                        sink.write(json.dumps(row) + "\n")
                        sink.flush()
                if bar is not None:
                    bar.update(1)
    finally:
        if venv is not None:
            venv.close()
        if sink is not None:
            try:
                sink.close()
            except OSError:  # the write that failed is what is reported (its rows before it are on disk)
                pass
        if bar is not None:
            bar.close()
    rows.sort(key=lambda r: r["question_index"])
    out: dict[str, Any] = {"policy": getattr(trigger, "name", type(trigger).__name__), "n": len(rows),
                           **summarize_rows(rows), "reward_at_env_lambda": lam}
    if return_episodes:
        out["episodes"] = rows
    return out


def _row(qidx: int, info: dict[str, Any], ret: float, steps: int, truncated: bool) -> dict[str, Any]:
    return {"question_index": qidx, "question_id": info["question_id"], "question": info.get("question"),
            "quality": float(info["quality"]),
            "calls": int(info["retrievals"]), "reward": float(ret), "steps": steps,
            "tokens": int(info.get("tokens", 0)), "seconds": float(info.get("seconds", 0.0)),
            "answer": info.get("answer"), "truncated": truncated,
            "metrics": {k: float(v) for k, v in (info.get("metrics") or {}).items()},
            "answer_status": info.get("answer_status"),
            "decisions": [_jsonable(d) for d in info.get("episode", [])]}


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x)))


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Means over per-question rows: accuracy (the mean quality), calls, reward, steps, tokens and seconds per
    question; the task's answer ``metrics`` and how episodes ended (``closed_share``, ``no_answer_share``) when the
    rows carry them."""
    if not rows:
        return {k: float("nan") for k in ("accuracy", "calls_per_question", "reward", "steps_per_question",
                                          "tokens_per_question", "seconds_per_question")}

    def mean(key):
        return float(np.mean([r.get(key, 0.0) for r in rows]))

    out = {"accuracy": mean("quality"), "calls_per_question": mean("calls"), "reward": mean("reward"),
           "steps_per_question": mean("steps"), "tokens_per_question": mean("tokens"),
           "seconds_per_question": mean("seconds")}
    names = list(dict.fromkeys(k for r in rows for k in (r.get("metrics") or {})))
    if names:  # every answer metric of the task (e.g. F1 and EM), means over the rows
        out["metrics"] = {k: float(np.mean([(r.get("metrics") or {}).get(k, 0.0) for r in rows])) for k in names}
    status = [r.get("answer_status") for r in rows if r.get("answer_status")]
    if status:  # how the episodes ended: share closed by answer_closing, share without a usable answer
        out["closed_share"] = float(np.mean([s == "closed" for s in status]))
        out["no_answer_share"] = float(np.mean([s == "none" for s in status]))
    return out
