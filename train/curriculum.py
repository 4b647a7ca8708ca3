"""Curricula: per-cost λ schedules, applied to every EnvRunner each training iteration.

Example:
    >>> from train.config import ScheduleConfig
    >>> s = ScheduleConfig(kind="linear", start=0.5, end=0.1, iterations=4)
    >>> [round(schedule_value(s, i), 2) for i in range(6)]
    [0.5, 0.4, 0.3, 0.2, 0.1, 0.1]
    >>> round(schedule_value(ScheduleConfig(kind="exponential", start=0.5, end=0.1, iterations=2), 1), 3)
    0.224
"""

from __future__ import annotations

import logging
import math
from typing import Any

from train.config import ScheduleConfig

log = logging.getLogger(__name__)


def schedule_value(s: ScheduleConfig, iteration: int) -> float:
    """λ of schedule ``s`` at (0-based) training ``iteration``."""
    if s.kind == "constant" or s.iterations == 0:
        return s.start if s.kind == "constant" or iteration < s.delay else s.end
    t = min(max((iteration - s.delay) / s.iterations, 0.0), 1.0)
    if s.kind == "linear":
        return s.start + (s.end - s.start) * t
    if s.kind == "cosine":
        return s.end + (s.start - s.end) * 0.5 * (1.0 + math.cos(math.pi * t))
    if s.kind == "exponential":
        return s.start * (s.end / s.start) ** t
    raise ValueError(f"unknown schedule kind '{s.kind}'")


class Curriculum:
    """λ of every scheduled cost at a given iteration."""

    def __init__(self, schedules: dict[str, ScheduleConfig | dict[str, Any]] | None):
        self.schedules = {k: v if isinstance(v, ScheduleConfig) else ScheduleConfig.from_dict(v)
                          for k, v in (schedules or {}).items()}

    def weights(self, iteration: int) -> dict[str, float]:
        return {k: float(schedule_value(s, iteration)) for k, s in self.schedules.items()}


def set_env_cost_weights(env: Any, weights: dict[str, float]) -> int:
    """Set λ on an env, a vector env or a wrapper of either; returns how many (sub-)envs took it."""
    u = getattr(env, "unwrapped", env)
    if hasattr(u, "set_cost_weights"):
        u.set_cost_weights(weights)
        return int(getattr(u, "num_envs", 1))
    if hasattr(u, "envs"):  # e.g. SyncVectorEnv
        return sum(set_env_cost_weights(e, weights) for e in u.envs)
    if hasattr(u, "call"):
        u.call("set_cost_weights", weights)
        return int(getattr(u, "num_envs", 1))
    return 0


def apply_cost_weights(env_runner_group, weights: dict[str, float]) -> list[Any]:
    """Set λ on every EnvRunner (remote and local). Never raises inside a runner (that would kill it).

    Returns one entry per runner: the number of envs updated, ``None`` for runners without an env, or the
    error text where setting failed.
    """
    if not weights or env_runner_group is None:
        return []

    def _set(runner):
        env = getattr(runner, "env", None)
        if env is None:
            return None
        try:
            return set_env_cost_weights(env, weights)
        except Exception as e:  # noqa: BLE001 - an exception here would kill the remote runner
            return f"{type(e).__name__}: {e}"

    out = env_runner_group.foreach_env_runner(_set, local_env_runner=True)
    for r in out:
        if isinstance(r, str):
            log.warning("could not set cost weights on an env runner: %s", r)
    return out
