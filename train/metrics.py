"""What a run logs of each training iteration: the flat metrics taken from RLlib's result dict (answer quality,
retrievals, costs and λ, losses, entropy: :func:`iteration_metrics`) and the terminal line that shows them
(:func:`progress_line`).
"""

from __future__ import annotations

from typing import Any


def _get(d: dict, *path: str, default: float | None = None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def iteration_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The flat per-iteration metrics we log (answer quality, retrievals, costs and λ, losses, entropy)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    env = result.get("env_runners", {}) or {}
    learner = _get(result, "learners", DEFAULT_MODULE_ID, default={}) or {}
    out: dict[str, float] = {
        "episode_return": env.get("episode_return_mean"),
        "episode_len": env.get("episode_len_mean"),
        "episodes": env.get("num_episodes"),
        "quality": env.get("quality"),
        "retrievals_per_episode": env.get("retrievals"),
    }
    for k, v in env.items():
        if k.startswith(("cost_", "lambda_")):
            out[k] = v
    for k, v in (result.get("curriculum") or {}).items():
        out[f"curriculum_{k}"] = v
    for k in ("total_loss", "policy_loss", "vf_loss", "floor_loss", "entropy", "retrieve_prob", "return_to_go_mean",
              "gradients_default_optimizer_global_norm"):
        if k in learner:
            out[k] = learner[k]
    out["env_steps_lifetime"] = env.get("num_env_steps_sampled_lifetime")
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float))}


def progress_line(it: int, total: int, m: dict[str, float], secs: float) -> str:
    lam = m.get("curriculum_lambda_retrieval_calls", m.get("lambda_retrieval_calls", float("nan")))
    return (f"[{it:>4}/{total}] return {m.get('episode_return', float('nan')):+.3f}  "
            f"quality {m.get('quality', float('nan')):.3f}  retr/ep {m.get('retrievals_per_episode', float('nan')):.2f}  "
            f"λ {lam:.3f}  H {m.get('entropy', float('nan')):.3f}  p(retr) {m.get('retrieve_prob', float('nan')):.3f}  "
            f"loss {m.get('total_loss', float('nan')):+.3f}  {secs:.1f}s")
