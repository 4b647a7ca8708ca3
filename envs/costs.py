"""Reward costs: plain callables in a name registry, one weight (λ) per cost (TRL's reward-function style).

The environment builds one :class:`CostEvent` per decision and pays ``Σ_c λ_c · cost_c(event)``; every raw
cost appears in ``info["costs"]``. Weights change at run time (``env.unwrapped.set_cost_weights``), which is
how curricula anneal λ.

Plug in your own cost by dotted path — no registration needed::

    # mypkg/costs.py
    class GpuSeconds:
        name = "gpu_seconds"
        def __init__(self, price_per_s: float = 1.0):
            self.price_per_s = price_per_s
        def __call__(self, event):
            return self.price_per_s * event.seconds_modelled

    # config: costs: {"retrieval_calls": 0.1, "mypkg.costs:GpuSeconds": 0.05}

Example:
    >>> model = CostModel({"retrieval_calls": 0.2, "tokens": 0.001})
    >>> total, raw = model(CostEvent(retrieved=True, tokens_generated=10, tokens_injected=12))
    >>> raw["retrieval_calls"], raw["tokens"], round(total, 3)
    (1.0, 22.0, 0.222)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from envs.core.registry import Registry


@dataclass(frozen=True)
class CostEvent:
    """What one decision cost: everything a cost function may look at."""

    retrieved: bool = False
    n_passages: int = 0
    tokens_generated: int = 0
    tokens_injected: int = 0
    seconds_measured: float = 0.0
    seconds_modelled: float = 0.0
    step_index: int = 0


@runtime_checkable
class RewardCost(Protocol):
    """A cost: ``name`` and ``__call__(event) -> float >= 0``."""

    name: str

    def __call__(self, event: CostEvent) -> float:
        raise NotImplementedError


#: reward costs by name (``COSTS.names()``; a dotted path ``package.module:Class`` works too)
COSTS: Registry[Callable[..., RewardCost]] = Registry("cost")


def register_cost(name: str) -> Callable[[type], type]:
    """Class decorator: make a cost available by ``name`` in configs (sets ``cls.name``)."""
    def deco(cls: type) -> type:
        COSTS.register(name, cls)
        cls.name = name
        return cls
    return deco


def available_costs() -> list[str]:
    return COSTS.names()


@register_cost("retrieval_calls")
class RetrievalCalls:
    """1 per retrieval call."""

    def __call__(self, event: CostEvent) -> float:
        return 1.0 if event.retrieved else 0.0


@register_cost("latency")
class Latency:
    """Seconds of the decision: ``measured`` wall time, or a deterministic ``modelled`` latency
    (``per_call_s`` per retrieval + ``per_token_s`` per generated or injected token) for reproducible training."""

    def __init__(self, mode: str = "modelled", per_call_s: float = 0.05, per_token_s: float = 0.002):
        if mode not in ("modelled", "measured"):
            raise ValueError(f"latency cost: mode must be 'modelled' or 'measured', got '{mode}'")
        self.mode, self.per_call_s, self.per_token_s = mode, per_call_s, per_token_s

    def __call__(self, event: CostEvent) -> float:
        if self.mode == "measured":
            return max(0.0, event.seconds_measured)
        return modelled_seconds(event, self.per_call_s, self.per_token_s)


def modelled_seconds(event: CostEvent, per_call_s: float = 0.05, per_token_s: float = 0.002) -> float:
    """The deterministic latency model used by :class:`Latency` (and for ``CostEvent.seconds_modelled``)."""
    calls = 1.0 if event.retrieved else 0.0
    return per_call_s * calls + per_token_s * (event.tokens_generated + event.tokens_injected)


@register_cost("tokens")
class Tokens:
    """Generated + injected tokens."""

    def __call__(self, event: CostEvent) -> float:
        return float(event.tokens_generated + event.tokens_injected)


@register_cost("dollars")
class Dollars:
    """Price of the tokens: injected tokens at the input price, generated at the output price (per million)."""

    def __init__(self, input_per_million: float = 0.15, output_per_million: float = 0.60):
        self.input_per_million, self.output_per_million = input_per_million, output_per_million

    def __call__(self, event: CostEvent) -> float:
        return (event.tokens_injected * self.input_per_million
                + event.tokens_generated * self.output_per_million) / 1e6


def make_cost(spec: str, **kwargs: Any) -> RewardCost:
    """A cost from a registered name or a dotted path ``package.module:Class`` (a class is instantiated with
    ``kwargs``; a function is used as is)."""
    obj = COSTS.get(spec)
    cost = obj(**kwargs) if isinstance(obj, type) else obj
    if not callable(cost):
        raise ValueError(f"cost '{spec}' is not callable")
    if not getattr(cost, "name", None):
        try:
            cost.name = spec
        except AttributeError:  # a plain function object without settable attributes
            pass
    return cost


#: the offset of :func:`cost_feature` (λ = 0 stays finite; the range policies are trained on, 0.02–0.5, is spread)
COST_FEATURE_OFFSET = 0.01


def cost_feature(weight: float) -> float:
    """What a cost-conditioned policy observes of a cost's weight λ (``EnvConfig.observe_costs``): log(λ + 0.01).

    >>> round(cost_feature(0.1), 3), round(cost_feature(0.0), 3)
    (-2.207, -4.605)
    """
    return float(math.log(float(weight) + COST_FEATURE_OFFSET))


def draw_weight(rng, low: float, high: float) -> float:
    """A λ drawn log-uniformly from ``[low, high]`` (``low == high``: that value) with the numpy Generator ``rng``."""
    if low == high:
        return float(low)
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def check_ranges(ranges: dict[str, Any], names: list[str]) -> dict[str, tuple[float, float]]:
    """``{cost: (low, high)}`` checked: known costs, 0 < low <= high, finite."""
    out = {}
    for k, r in ranges.items():
        if k not in names:
            raise ValueError(f"unknown cost '{k}' in set_cost_ranges (costs of this env: {names})")
        try:
            low, high = (float(x) for x in r)
        except (TypeError, ValueError):
            raise ValueError(f"cost range of '{k}' must be a pair (low, high), got {r!r}") from None
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
            raise ValueError(f"cost range of '{k}' must have 0 < low <= high (finite; draws are log-uniform), got "
                             f"({low}, {high})")
        out[k] = (low, high)
    return out


class CostModel:
    """The costs of an env and their weights.

    Args:
        weights: cost spec (name or dotted path) -> λ.
        params: optional cost spec -> constructor kwargs.
    """

    def __init__(self, weights: dict[str, float], params: dict[str, dict[str, Any]] | None = None):
        params = params or {}
        unknown = [k for k in params if k not in weights]
        if unknown:
            raise ValueError(f"cost params given for '{unknown[0]}', which has no weight (costs: {list(weights)})")
        self.costs = {spec: make_cost(spec, **params.get(spec, {})) for spec in weights}
        self.weights: dict[str, float] = {}
        self.set_weights(weights)

    def set_weights(self, weights: dict[str, float]) -> None:
        """Change λ of known costs (an unknown name is an error, not a silent no-op); every weight is checked before
        any is changed."""
        if not isinstance(weights, Mapping):
            raise ValueError(f"cost weights are a mapping {{cost: λ}} (e.g. {{'retrieval_calls': 0.1}}), got "
                             f"{type(weights).__name__} {weights!r:.80}")
        for k, v in weights.items():
            if k not in self.costs:
                raise ValueError(f"unknown cost '{k}' in set_cost_weights (costs of this env: {list(self.costs)})")
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)) or v < 0:
                raise ValueError(f"cost weight of '{k}' must be a finite number >= 0, got {v!r}")
        for k, v in weights.items():
            self.weights[k] = float(v)

    def __call__(self, event: CostEvent) -> tuple[float, dict[str, float]]:
        raw = {}
        for k, c in self.costs.items():
            v = float(c(event))
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"cost '{k}' returned {v} (a cost must be a finite number >= 0)")
            raw[k] = v
        return sum(self.weights[k] * raw[k] for k in raw), raw
