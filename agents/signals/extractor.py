"""Compute a set of signals per step, masking the ones a backend cannot provide (docs/design.md §3).

Example:
    >>> import numpy as np
    >>> from agents.reasoners.base import Capabilities, Step
    >>> ex = SignalExtractor(["ppl", "pulse"], Capabilities(logprobs=True), backend="openai",
    ...                      options={"pulse": {"layers": (1, 3)}})
    >>> out = ex(Step(1, "", "a", False, logprobs=np.log([0.5, 0.5])))
    >>> out["ppl"].tolist(), out["pulse"].tolist(), out["mask"].tolist()
    ([2.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0])
    >>> SignalExtractor(["pulse"], Capabilities(logprobs=True), backend="openai", strict=True)
    Traceback (most recent call last):
    ...
    agents.signals.base.MissingCapabilityError: PUlSE needs hidden_states, which backend 'openai' does not expose
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from agents.reasoners.base import Capabilities, Step
from agents.signals.base import MissingCapabilityError, Signal, SignalUnavailable, make_signal

log = logging.getLogger(__name__)

#: how far above 0 a token log-probability (and above 1 a max-probability, below 0 an entropy) may be: float rounding
#: of a probability-1 token, never a real probability (``+5`` would be a probability of 148)
TOKEN_TOLERANCE = 1e-3

#: the causes already warned about in this process (one WARNING per cause, then debug lines)
_warned: set[str] = set()


def _warn_once(cause: str, message: str, *args: Any) -> None:
    if cause in _warned:
        log.debug(message, *args)
        return
    _warned.add(cause)
    log.warning(message + " (said once per process and cause)", *args)


def token_array_problem(step: Step) -> tuple[str, str] | None:
    """Why a step's per-token arrays are out of range: ``(cause, words)``, or ``None`` when they are in range.

    In range: every ``logprobs`` value is ``<= 0`` (a probability ``<= 1``; ``-inf``, a probability of 0, included;
    ``+inf`` and NaN are not), every ``maxprobs`` value in ``[0, 1]``, every ``entropies`` value finite and ``>= 0``
    — each within :data:`TOKEN_TOLERANCE`. A backend that sends a positive log-probability (an HTTP server's bug) or
    NaN would otherwise give a max-probability of 148 or a negative entropy, read as real signals.

    Example:
        >>> token_array_problem(Step(1, "", "a", False, logprobs=np.array([-0.1, 5.0])))
        ('logprobs:above', 'a log-probability above 0 (+5) in step.logprobs')
        >>> token_array_problem(Step(1, "", "a", False, logprobs=np.array([-0.1, -2.0]))) is None
        True
    """
    tol = TOKEN_TOLERANCE
    for name, lo, hi, what in (("logprobs", -np.inf, tol, "a log-probability above 0"),
                               ("maxprobs", -tol, 1.0 + tol, "a max-probability outside [0, 1]"),
                               ("entropies", -tol, np.inf, "a negative entropy")):
        x = getattr(step, name, None)
        if x is None:
            continue
        a = np.asarray(x, dtype=np.float64).reshape(-1)
        if a.size == 0:
            continue
        if np.isnan(a).any():
            return f"{name}:nan", f"NaN in step.{name}"
        if np.isinf(a).any() and not (name == "logprobs" and (a[np.isinf(a)] < 0).all()):  # log 0 = -inf is fine
            return f"{name}:inf", f"an infinite value in step.{name}"
        bad = a[(a > hi) | (a < lo)]
        if bad.size:
            worst = bad[np.argmax(np.abs(bad))]
            return f"{name}:{'above' if worst > hi else 'below'}", f"{what} ({worst:+.3g}) in step.{name}"
    return None


class SignalExtractor:
    """Per-step signals by name plus a ``mask`` of which ones are real.

    Args:
        signals: registry names (or :class:`Signal` instances) in output order.
        capabilities: what the backend exposes (default: taken from ``reasoner``).
        reasoner: optional backend; supplies ``capabilities``, its name and model facts
            (``n_layers``, ``hidden_size``, ``model_id``) for model-dependent signals.
        backend: backend name used in error messages (default: the reasoner's class name).
        strict: ``True`` (every requested signal) or a collection of names that must be real: requesting
            one whose requirements the backend lacks raises :class:`MissingCapabilityError`.
        options: per-signal constructor options, ``{name: {option: value}}``.
        context: extra model facts passed to the signal constructors that accept them.

    A signal the backend cannot support, or that raises :class:`SignalUnavailable` at a step (e.g. a step
    without content tokens) or returns non-finite numbers, is reported as zeros with mask 0. So are the signals read
    from token log-probabilities (``requires`` ``logprobs``) at a step whose per-token arrays are out of range
    (:func:`token_array_problem`: a positive log-probability, NaN, infinity), with a WARNING once per cause.
    """

    def __init__(self, signals: Sequence[str | Signal], capabilities: Capabilities | None = None, *,
                 reasoner: Any = None, backend: str | None = None, strict: bool | Iterable[str] = False,
                 options: dict[str, dict[str, Any]] | None = None, context: dict[str, Any] | None = None):
        if capabilities is None:
            if reasoner is None:
                raise ValueError("SignalExtractor needs capabilities= or reasoner=")
            capabilities = reasoner.capabilities
        self.capabilities = capabilities
        self.backend = backend or getattr(reasoner, "name", None) or (type(reasoner).__name__ if reasoner else "unknown")
        ctx = {k: getattr(reasoner, k) for k in ("n_layers", "hidden_size", "model_id")
               if reasoner is not None and getattr(reasoner, k, None) is not None}
        ctx.update(context or {})
        options = options or {}
        self.signals: list[Signal] = []
        for s in signals:
            sig = make_signal(s, ctx, **options.get(s, {})) if isinstance(s, str) else s
            self.signals.append(sig)
        self.names = [s.name for s in self.signals]
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"duplicate signal names in {self.names}")
        unknown = set(options) - set(self.names) - {s for s in signals if isinstance(s, str)}
        if unknown:
            raise ValueError(f"options given for signals not requested: {sorted(unknown)}")
        strict_names = set(self.names) if strict is True else set(strict or ())
        self.supported: dict[str, bool] = {}
        for sig in self.signals:
            missing = capabilities.missing(tuple(sig.requires))
            if missing and sig.name in strict_names:
                label = getattr(sig, "label", "") or sig.name
                raise MissingCapabilityError(
                    f"{label} needs {' and '.join(missing)}, which backend '{self.backend}' does not expose")
            if missing:
                log.info("signal %s masked: backend '%s' lacks %s", sig.name, self.backend, ", ".join(missing))
            self.supported[sig.name] = not missing

    @property
    def dims(self) -> dict[str, int]:
        """Vector length of every signal."""
        return {s.name: int(s.dim) for s in self.signals}

    def __call__(self, step: Step, state: Any = None) -> dict[str, np.ndarray]:
        """``{name: float32 vector, ..., "mask": float32 [n_signals]}`` for one step."""
        out: dict[str, np.ndarray] = {}
        mask = np.zeros(len(self.signals), dtype=np.float32)
        served = step.meta.get("signals", {}) if step.meta else {}  # computed next to the model (reasoner service)
        problem = token_array_problem(step)
        if problem is not None:
            reading = [s.name for s in self.signals if "logprobs" in s.requires and s.name not in served]
            if reading:
                _warn_once(f"{self.backend}:{problem[0]}", "backend '%s' gave %s at step %d: the signals read from "
                           "the token log-probabilities (%s) are masked for such steps, not trusted", self.backend,
                           problem[1], step.index, ", ".join(reading))
        for i, sig in enumerate(self.signals):
            value = None
            if sig.name in served:
                value = None if served[sig.name] is None else np.asarray(served[sig.name], dtype=np.float32)
            elif problem is not None and "logprobs" in sig.requires:
                value = None  # out-of-range token log-probabilities (warned above)
            elif self.supported[sig.name]:
                try:
                    value = np.asarray(sig(step, state), dtype=np.float32).reshape(-1)
                except SignalUnavailable as e:
                    log.debug("signal %s unavailable at step %d: %s", sig.name, step.index, e)
                if value is not None and (value.shape[0] != sig.dim and sig.dim > 0):
                    raise ValueError(f"signal '{sig.name}' returned {value.shape[0]} numbers, declared dim {sig.dim}")
                if value is not None and not np.all(np.isfinite(value)):
                    _warn_once(f"{self.backend}:{sig.name}:non-finite", "signal %s is not finite (%s) at step %d "
                               "(backend '%s'): it is masked for such steps", sig.name, value.tolist()[:4],
                               step.index, self.backend)
                    value = None
            if value is None:
                value = np.zeros(int(sig.dim), dtype=np.float32)
            else:
                mask[i] = 1.0
            out[sig.name] = value
        out["mask"] = mask
        return out

    def extract(self, steps: Sequence[Step], states: Sequence[Any] | None = None) -> list[dict[str, np.ndarray]]:
        """:meth:`__call__` over many steps (``states[i]`` is the state ``steps[i]`` was generated from)."""
        states = states if states is not None else [None] * len(steps)
        return [self(s, st) for s, st in zip(steps, states)]
