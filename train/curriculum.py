"""Curricula: per-cost λ schedules, applied to every EnvRunner each training iteration.

A schedule is a function ``(start, end, t) -> λ`` of the progress ``t ∈ [0, 1]`` registered in
:data:`LAMBDA_SCHEDULES` (``ScheduleConfig.kind`` names one). Plug in your own::

    @LAMBDA_SCHEDULES.register("step")
    def step(start, end, t):
        return start if t < 0.5 else end

Example:
    >>> s = ScheduleConfig(kind="linear", start=0.5, end=0.1, iterations=4)
    >>> [round(schedule_value(s, i), 2) for i in range(6)]
    [0.5, 0.4, 0.3, 0.2, 0.1, 0.1]
    >>> round(schedule_value(ScheduleConfig(kind="exponential", start=0.5, end=0.1, iterations=2), 1), 3)
    0.224
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf
from envs.core.registry import Registry, UnknownNameError

log = logging.getLogger(__name__)

#: λ schedules by name: ``fn(start, end, t) -> λ`` for progress ``t`` in [0, 1] (``positive=True``: needs start,
#: end > 0)
LAMBDA_SCHEDULES: Registry = Registry("λ schedule", dotted_paths=False)


@LAMBDA_SCHEDULES.register("constant")
def constant(start: float, end: float, t: float) -> float:
    return start


@LAMBDA_SCHEDULES.register("linear")
def linear(start: float, end: float, t: float) -> float:
    return start + (end - start) * t


@LAMBDA_SCHEDULES.register("cosine")
def cosine(start: float, end: float, t: float) -> float:
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * t))


@LAMBDA_SCHEDULES.register("exponential", positive=True)
def exponential(start: float, end: float, t: float) -> float:
    return start * (end / start) ** t


@dataclass
class ScheduleConfig(ConfigBase):
    """A λ schedule over training iterations: ``start`` until ``delay``, then ``kind`` to ``end`` over
    ``iterations``."""

    kind: str = helpf("linear", "a registered λ schedule: constant | linear | cosine | exponential")
    start: float = helpf(0.5, "λ at iteration `delay` (and before)")
    end: float = helpf(0.1, "λ after `delay + iterations`")
    iterations: int = helpf(20, "iterations the schedule takes to go from start to end")
    delay: int = helpf(0, "iterations to hold `start` before moving")
    high: float | None = helpf(None, "a cost-conditioned policy (env `observe_costs`): each episode draws its λ "
                                     "log-uniformly from [the scheduled λ, high] — with start = high the range starts "
                                     "at the expensive end and widens as the schedule moves (null: every episode pays "
                                     "the scheduled λ)")

    def validate(self, where: str = "ScheduleConfig") -> None:
        import math

        for k in ("start", "end"):
            v = float(getattr(self, k))
            if not math.isfinite(v) or v < 0:
                raise ConfigError(f"{where}.{k} must be a finite λ >= 0, got {v}")
        try:
            info = LAMBDA_SCHEDULES.info(self.kind)
        except UnknownNameError as e:
            raise ConfigError(f"ScheduleConfig.kind: {e}") from None
        if info.get("positive") and (self.start <= 0 or self.end <= 0):
            raise ConfigError(f"ScheduleConfig: {self.kind} schedules need start > 0 and end > 0")
        if self.iterations < 0 or self.delay < 0:
            raise ConfigError("ScheduleConfig: iterations and delay must be >= 0")
        if self.high is not None:
            low = min(float(self.start), float(self.end))
            if not math.isfinite(float(self.high)) or low <= 0 or float(self.high) < max(self.start, self.end):
                raise ConfigError(f"{where}.high: a drawn λ range [scheduled λ, high] needs 0 < start, end <= high "
                                  f"(draws are log-uniform), got start {self.start}, end {self.end}, high {self.high}")


def schedule_value(s: ScheduleConfig, iteration: int) -> float:
    """λ of schedule ``s`` at (0-based) training ``iteration``."""
    if s.iterations == 0:
        t = 0.0 if iteration < s.delay else 1.0
    else:
        t = min(max((iteration - s.delay) / s.iterations, 0.0), 1.0)
    return float(LAMBDA_SCHEDULES.get(s.kind)(s.start, s.end, t))


class Curriculum:
    """λ of every scheduled cost at a given iteration."""

    def __init__(self, schedules: dict[str, ScheduleConfig | dict[str, Any]] | None):
        self.schedules = {k: v if isinstance(v, ScheduleConfig) else ScheduleConfig.from_dict(v)
                          for k, v in (schedules or {}).items()}

    def weights(self, iteration: int) -> dict[str, float]:
        """λ of every scheduled cost whose episodes pay the scheduled value (no ``high``)."""
        return {k: float(schedule_value(s, iteration)) for k, s in self.schedules.items() if s.high is None}

    def ranges(self, iteration: int) -> dict[str, tuple[float, float]]:
        """``(low, high)`` of every cost whose episodes draw their λ (``high`` set): low is the scheduled λ."""
        return {k: (float(schedule_value(s, iteration)), float(s.high)) for k, s in self.schedules.items()
                if s.high is not None}

    def final(self) -> dict[str, float | tuple[float, float]]:
        """Each cost's λ after the schedule ends: a value, or the ``(low, high)`` range episodes draw from."""
        return {k: (float(s.end), float(s.high)) if s.high is not None else float(s.end)
                for k, s in self.schedules.items()}


def set_env_cost_weights(env: Any, weights: dict[str, Any], method: str = "set_cost_weights") -> int:
    """Set λ (``method="set_cost_ranges"``: the ranges episodes draw λ from) on an env, a vector env or a wrapper of
    either; returns how many (sub-)envs took it."""
    u = getattr(env, "unwrapped", env)
    if hasattr(u, method):
        getattr(u, method)(weights)
        return int(getattr(u, "num_envs", 1))
    if hasattr(u, "envs"):  # e.g. SyncVectorEnv
        return sum(set_env_cost_weights(e, weights, method) for e in u.envs)
    if hasattr(u, "call"):
        u.call(method, weights)
        return int(getattr(u, "num_envs", 1))
    return 0


def apply_cost_weights(env_runner_group, weights: dict[str, Any], method: str = "set_cost_weights") -> list[Any]:
    """Set λ (or, with ``method="set_cost_ranges"``, the ranges each episode draws λ from) on every EnvRunner
    (remote and local). Never raises inside a runner (that would kill it).

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
            return set_env_cost_weights(env, weights, method)
        except Exception as e:  # noqa: BLE001 - an exception here would kill the remote runner
            return f"{type(e).__name__}: {e}"

    out = env_runner_group.foreach_env_runner(_set, local_env_runner=True)
    for r in out:
        if isinstance(r, str):
            log.warning("could not set cost weights on an env runner: %s", r)
    return out
