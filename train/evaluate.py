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

from pathlib import Path
from typing import Any

import numpy as np


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
                    batch_size: int = 16, components=None, return_episodes: bool = False) -> dict[str, Any]:
    """Greedy episodes of ``policy_or_trigger`` on ``question_indices`` of ``env_config``'s split.

    Args:
        policy_or_trigger: a Trigger (``decide(obs, info)``), a :class:`policies.rl.net.PolicyNet`, or the
            directory of an exported policy.
        env_config: :class:`envs.env_config.EnvConfig` or dict (micro-world preset defaults apply); its
            ``costs`` are the λ the reward uses. ``max_questions`` is lifted to cover the indices.
        question_indices: indices into the split's question list.
        batch_size: questions in flight at once (one batched generation call per round).
        components: prebuilt env components (reuse the model across calls).
        return_episodes: also return per-question rows.

    Returns:
        ``{"policy", "n", "accuracy", "calls_per_question", "reward", "steps_per_question"}`` (+ ``episodes``).
    """
    from envs.env_config import EnvConfig
    from envs.registration import PRESETS
    from envs.vector import BatchedRetrievalEnv

    trigger = _as_trigger(policy_or_trigger)
    cfg = env_config.to_dict() if isinstance(env_config, EnvConfig) else dict(env_config or {})
    cfg = {**PRESETS["microworld"], **cfg}
    if question_indices and cfg.get("max_questions") is not None:
        cfg["max_questions"] = max(int(cfg["max_questions"]), max(question_indices) + 1)
    venv = BatchedRetrievalEnv(min(batch_size, max(1, len(question_indices))), cfg, components=components)
    lam = venv.envs[0].get_cost_weights()
    rows: list[dict[str, Any]] = []
    try:
        for start in range(0, len(question_indices), venv.num_envs):
            chunk = question_indices[start:start + venv.num_envs]
            envs_ = venv.envs[:len(chunk)]
            outs = venv._run([e.reset_gen(options={"question_index": int(q)}) for e, q in zip(envs_, chunk)])
            obs = [o for o, _ in outs]
            infos = [i for _, i in outs]
            ret = [0.0] * len(chunk)
            steps = [0] * len(chunk)
            active = list(range(len(chunk)))
            for j in active:
                trigger.reset(seed=int(chunk[j]))
            while active:
                acts = {j: trigger.decide(obs[j], infos[j]) for j in active}
                res = venv._run([envs_[j].step_gen(acts[j]) for j in active])
                still = []
                for j, (o, r, te, tr, info) in zip(active, res):
                    obs[j], infos[j] = o, info
                    ret[j] += r
                    steps[j] += 1
                    if te or tr:
                        rows.append({"question_index": int(chunk[j]), "question_id": info["question_id"],
                                     "quality": float(info["quality"]), "calls": int(info["retrievals"]),
                                     "reward": ret[j], "steps": steps[j]})
                    else:
                        still.append(j)
                active = still
    finally:
        venv.close()
    rows.sort(key=lambda r: r["question_index"])
    q = np.array([r["quality"] for r in rows]) if rows else np.zeros(0)
    calls = np.array([r["calls"] for r in rows]) if rows else np.zeros(0)
    out: dict[str, Any] = {
        "policy": getattr(trigger, "name", type(trigger).__name__), "n": len(rows),
        "accuracy": float(q.mean()) if rows else float("nan"),
        "calls_per_question": float(calls.mean()) if rows else float("nan"),
        "reward": float(np.mean([r["reward"] for r in rows])) if rows else float("nan"),
        "reward_at_env_lambda": lam,
        "steps_per_question": float(np.mean([r["steps"] for r in rows])) if rows else float("nan"),
    }
    if return_episodes:
        out["episodes"] = rows
    return out
