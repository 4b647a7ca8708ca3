"""Fixed retrieval triggers (docs/design.md §8): every non-learned policy behind one interface.

A trigger sees what a learned policy sees — the observation and the env's ``info`` (which carries every
signal of the current step by name, and the ground-truth label where known) — and returns an action.

Every trigger is registered in :data:`TRIGGERS` (the benchmark's method ``kind``); plug in your own with
``@TRIGGERS.register("name")`` on a class with ``decide`` / ``reset`` / ``describe``, or a dotted path.

Example:
    >>> t = TRIGGERS.make("threshold", "minprob", 0.3, direction="below", name="FLARE[unmasked]")
    >>> t.decide({}, {"signals": {"minprob": 0.1}, "step_index": 1})
    1
    >>> t.describe()
    'FLARE[unmasked]: retrieve when minprob < 0.3'
    >>> TRIGGERS.names()
    ['never', 'always', 'single', 'random', 'threshold', 'fixed_mode', 'oracle']
"""

from __future__ import annotations

import copy
import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

from envs.core.registry import Registry

#: fixed triggers by name (the benchmark's method kinds read it)
TRIGGERS: Registry[type] = Registry("trigger")


@runtime_checkable
class Trigger(Protocol):
    """``decide(observation, info) -> action``; ``reset(seed)`` at each episode; ``describe()``."""

    name: str

    def reset(self, seed: int | None = None) -> None:
        raise NotImplementedError

    def decide(self, observation: Any, info: dict[str, Any]) -> int:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


class _Base:
    name = "trigger"

    def reset(self, seed: int | None = None) -> None:
        return None

    def describe(self) -> str:
        return self.name


@TRIGGERS.register("never")
class NeverTrigger(_Base):
    """CoT: never retrieve."""

    name = "CoT"

    def decide(self, observation, info) -> int:
        return 0

    def describe(self) -> str:
        return "CoT: never retrieve"


@TRIGGERS.register("always")
class AlwaysTrigger(_Base):
    """Retrieve at every step: IRCoT's timing. What it retrieves with and how much is the env's (query mode,
    ``passages_per_retrieval``, the caps): IRCoT as published is this trigger in the env the benchmark's ``ircot``
    kind sets up; with the env's defaults it is the ``IRCoT[step query, 1 passage, ≤4]`` variant."""

    name = "Always"

    def decide(self, observation, info) -> int:
        return 1

    def describe(self) -> str:
        return "Always: retrieve at every step"


@TRIGGERS.register("single")
class SingleTrigger(_Base):
    """Single RAG's timing: retrieve once, at the first decision. As published, the query is the question (the
    benchmark runs it with query mode ``question``) and the top-k passages are injected (the env's
    ``passages_per_retrieval``; the benchmark's kind ``single`` sets it to its ``k``): step 1 is regenerated with the
    evidence injected before it, so the chain reads evidence → step 1 → … as when retrieving before step 1.
    Deviation: the discarded first draft of step 1 is counted in tokens and time."""

    name = "SingleRAG"

    def decide(self, observation, info) -> int:
        return int(info.get("step_index", 1) == 1 and info.get("retrievals_this_step", 0) == 0)

    def describe(self) -> str:
        return "Single RAG: retrieve once before step 1"


@TRIGGERS.register("random")
class RandomTrigger(_Base):
    """Bernoulli(p), seeded per episode."""

    def __init__(self, p: float, seed: int = 0, name: str | None = None):
        if not 0 <= p <= 1:
            raise ValueError(f"RandomTrigger: p must be in [0, 1], got {p}")
        self.p, self.seed = p, seed
        self.name = name or f"Random(p={p:.2f})"
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(self.seed if seed is None else (self.seed, seed))

    def decide(self, observation, info) -> int:
        return int(self.rng.random() < self.p)

    def describe(self) -> str:
        return f"{self.name}: retrieve with probability {self.p:.3f}"


@TRIGGERS.register("threshold")
class ThresholdTrigger(_Base):
    """Retrieve when a named signal crosses a threshold: FLARE (MinProb; its masked query is the env's query mode
    ``masked:<β>``, the benchmark's kind ``flare``), DRAGIN (RIND), SeaKR (EigenScore), PUlSE / ReProbe (probe
    probability), RSUS (at τ = 0.65: ReaLM-Retrieve's "Fixed threshold τ" ablation), PPL, …

    The decision is per step (the env's unit): a flagged step is regenerated whole with the evidence. For FLARE
    and SeaKR that is the published unit (a sentence / a reasoning step); DRAGIN fires at a token and regenerates
    from there, so its benchmark row is named ``DRAGIN[step-level]``.

    Args:
        signal: key in ``info["signals"]`` (a scalar signal).
        threshold: the threshold (calibrate it on dev; never copy it from a paper). The one no value crosses —
            ``-inf`` with ``below``, ``+inf`` with ``above`` — never fires, on masked steps too (:attr:`never_fires`:
            the benchmark's never-fire point, whose row is CoT's).
        direction: ``above`` (retrieve when value > τ) or ``below`` (value < τ).
        name: display name.
        on_masked: what to do at a step where the env masked the signal (e.g. a step with no content
            tokens): ``accept`` (default), ``retrieve`` or ``error``. An unknown signal name is always an error.
    """

    def __init__(self, signal: str, threshold: float, direction: str = "above", name: str | None = None,
                 on_masked: str = "accept"):
        if direction not in ("above", "below"):
            raise ValueError(f"ThresholdTrigger: direction must be 'above' or 'below', got '{direction}'")
        if on_masked not in ("accept", "retrieve", "error"):
            raise ValueError(f"ThresholdTrigger: on_masked must be accept, retrieve or error, got '{on_masked}'")
        self.on_masked = on_masked
        self.signal, self.threshold, self.direction = signal, float(threshold), direction
        self.name = name or f"{signal}{'>' if direction == 'above' else '<'}{threshold:g}"

    @property
    def never_fires(self) -> bool:
        """The threshold no value crosses (``below`` −inf, ``above`` +inf): the trigger never retrieves.

        >>> ThresholdTrigger("minprob", float("-inf"), "below").never_fires, ThresholdTrigger("rind", 0.5).never_fires
        (True, False)
        """
        return self.threshold == (-math.inf if self.direction == "below" else math.inf)

    def value(self, info: dict[str, Any]) -> float | None:
        """The signal's value at this step (``None`` when the env masked it)."""
        sig = info.get("signals", {})
        if self.signal in info.get("masked_signals", ()):
            if self.on_masked == "error":
                raise ValueError(f"ThresholdTrigger '{self.name}': signal '{self.signal}' is masked at this step")
            return None
        if self.signal not in sig:
            raise KeyError(f"ThresholdTrigger '{self.name}': signal '{self.signal}' is not in info['signals'] "
                           f"(available: {sorted(sig)})")
        v = np.asarray(sig[self.signal], dtype=float)
        if v.size != 1:
            raise ValueError(f"ThresholdTrigger: signal '{self.signal}' is not a scalar (shape {v.shape})")
        return float(v.reshape(()))

    def decide(self, observation, info) -> int:
        return self.decide_explained(observation, info)[0]

    def decide_explained(self, observation, info) -> tuple[int, dict[str, Any]]:
        """``(action, details)``: the action ``decide`` returns, with the signal's ``value`` (``None``: masked),
        the ``threshold`` and the ``direction``."""
        v = self.value(info)
        details = {"signal": self.signal, "value": v, "threshold": self.threshold, "direction": self.direction}
        if self.never_fires:
            return 0, details
        if v is None:
            return int(self.on_masked == "retrieve"), details
        return int(v > self.threshold if self.direction == "above" else v < self.threshold), details

    def describe(self) -> str:
        if self.never_fires:
            return f"{self.name}: never retrieve (threshold {self.threshold:g} on {self.signal})"
        op = ">" if self.direction == "above" else "<"
        return f"{self.name}: retrieve when {self.signal} {op} {self.threshold:g}"


@TRIGGERS.register("fixed_mode")
class FixedModeTrigger(_Base):
    """Any trigger with a fixed query formulation: ``decide`` returns ``(retrieve, mode_index)`` for an env with
    QueryGen actions (``querygen: true``), so a fixed trigger can retrieve with e.g. ``info_need`` queries.

    Args:
        trigger: the wrapped trigger (its ``decide`` returns 0/1).
        mode_index: index of the query mode in the env's ``query_modes``.
        mode: the mode's name (for ``describe``).
    """

    def __init__(self, trigger, mode_index: int, mode: str = ""):
        self.trigger, self.mode_index, self.mode = trigger, int(mode_index), mode
        self.name = getattr(trigger, "name", "trigger")

    def reset(self, seed: int | None = None) -> None:
        self.trigger.reset(seed)

    def __copy__(self):  # evaluate_policy copies a trigger per episode: copy the wrapped one too
        return FixedModeTrigger(copy.copy(self.trigger), self.mode_index, self.mode)

    def decide(self, observation, info):
        return (int(self.trigger.decide(observation, info)), self.mode_index)

    def decide_explained(self, observation, info) -> tuple[tuple[int, int], dict[str, Any]]:
        """The wrapped trigger's explained decision, with the fixed mode."""
        from envs.rollout import decide

        action, details = decide(self.trigger, observation, info)
        return (int(action), self.mode_index), details

    def describe(self) -> str:
        return f"{self.trigger.describe()} (query mode {self.mode or self.mode_index})"


@TRIGGERS.register("oracle")
class OracleTrigger(_Base):
    """Retrieve exactly when the ground-truth label says the current step is wrong (micro-world)."""

    name = "Oracle(labels)"

    def decide(self, observation, info) -> int:
        if "label" not in info:
            raise KeyError("OracleTrigger needs info['label'] (ground-truth step labels; micro-world only)")
        return int(info["label"] not in ("correct", "answer_correct") and info.get("retrievals_this_step", 0) == 0)

    def describe(self) -> str:
        return "Oracle: retrieve when the step is wrong (ground-truth labels)"
