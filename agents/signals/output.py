"""Output-level signals (docs/design.md §4): PPL, MaxProb, Entropy, MinProb (FLARE).

They read the step's per-token arrays: ``Step.logprobs`` (log p of each content token and of the end
token), ``Step.maxprobs`` and ``Step.entropies`` (of the predictive distribution at those positions).
By default the end token counts as one of the step's tokens (``include_end=True``: deciding that the
step is complete is part of generating it); ``include_end=False`` uses the content tokens only.

Example:
    >>> import numpy as np
    >>> from agents.reasoners.base import Step
    >>> s = Step(1, "", "", False, logprobs=np.log([0.5, 0.25]), maxprobs=np.array([0.5, 0.7]),
    ...          entropies=np.array([1.0, 2.0]))
    >>> [round(float(make(s)[0]), 4) for make in (PPL(), MaxProb(), Entropy(), MinProb())]
    [2.8284, 0.6, 1.5, 0.25]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.reasoners.base import Step
from agents.signals.base import SignalBase, SignalUnavailable, register_signal


def _tokens(step: Step, attr: str, include_end: bool) -> np.ndarray:
    x = getattr(step, attr)
    if x is None:
        raise SignalUnavailable(f"step {step.index} has no {attr}")
    x = np.asarray(x, dtype=np.float64)
    if not include_end and step.finished:
        x = x[:-1]
    if x.size == 0:
        raise SignalUnavailable(f"step {step.index} has no content tokens")
    return x


def step_ppl(logprobs: np.ndarray) -> float:
    """exp(mean NLL)."""
    return float(math.exp(-float(np.mean(logprobs))))


class _Output(SignalBase):
    requires = ("logprobs",)

    def __init__(self, include_end: bool = True):
        self.include_end = include_end

    def value(self, step: Step) -> float:
        raise NotImplementedError

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        return np.array([self.value(step)], dtype=np.float32)


@register_signal("ppl")
class PPL(_Output):
    """Step perplexity: exp of the mean negative log-probability of the step's tokens."""

    label, bounds, error_direction = "PPL", (1.0, math.inf), 1

    def value(self, step: Step) -> float:
        return step_ppl(_tokens(step, "logprobs", self.include_end))


@register_signal("maxprob")
class MaxProb(_Output):
    """Mean over the step's tokens of the maximum softmax probability."""

    label, bounds, error_direction = "MaxProb", (0.0, 1.0), -1

    def value(self, step: Step) -> float:
        return float(np.mean(_tokens(step, "maxprobs", self.include_end)))


@register_signal("entropy")
class Entropy(_Output):
    """Mean token entropy (nats) over the step's tokens."""

    label, bounds, error_direction = "Entropy", (0.0, math.inf), 1

    def value(self, step: Step) -> float:
        return float(np.mean(_tokens(step, "entropies", self.include_end)))


@register_signal("minprob")
class MinProb(_Output):
    """FLARE: the minimum probability of a generated token of the step (fires when it is ≤ θ)."""

    label, bounds, error_direction = "MinProb", (0.0, 1.0), -1

    def value(self, step: Step) -> float:
        return float(np.exp(np.min(_tokens(step, "logprobs", self.include_end))))


@register_signal("output", group="output", scalars={"ppl": 0, "maxprob": 1, "entropy": 2, "minprob": 3})
class OutputGroup(_Output):
    """The four output-level signals as one vector ``[PPL, MaxProb, Entropy, MinProb]`` (env ``output``)."""

    label, dim, bounds = "output", 4, (0.0, math.inf)

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        parts = (PPL, MaxProb, Entropy, MinProb)
        return np.array([p(self.include_end).value(step) for p in parts], dtype=np.float32)
