"""The signal interface (DESIGN §3) and the registry of signals by name.

A signal turns one generated :class:`~agents.reasoners.base.Step` (plus, optionally, the reasoner state the
step was generated *from*) into a fixed-size float vector. It declares the reasoner capabilities it needs in
``requires``; the :class:`~agents.signals.extractor.SignalExtractor` masks signals whose requirements a
backend lacks (never silently zero-fills without a mask).

Example — a custom signal, registered by name::

    >>> import numpy as np
    >>> from agents.reasoners.base import Step
    >>> @register_signal("n_words")
    ... class NWords(SignalBase):
    ...     label, dim = "Words", 1
    ...     def __call__(self, step, state=None):
    ...         return np.array([len(step.content.split())], dtype=np.float32)
    >>> make_signal("n_words")(Step(1, "Step 1 : a b .", "a b .", False))
    array([3.], dtype=float32)
    >>> _ = SIGNALS.unregister("n_words")
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agents.reasoners.base import Step
from envs.core.registry import Registry


class SignalUnavailable(ValueError):
    """This step lacks the data the signal needs (no content tokens, no sampled states, ...): mask it."""


class MissingCapabilityError(ValueError):
    """A signal that was explicitly required (``strict``) needs a capability the backend does not expose."""


@runtime_checkable
class Signal(Protocol):
    """One per-step signal.

    Attributes:
        name: registry name (``"pulse"``, ``"ppl"``, ...).
        requires: capability names of :class:`~agents.reasoners.base.Capabilities` it needs.
        dim: length of the returned vector.
    """

    name: str
    requires: tuple[str, ...]
    dim: int

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        """The signal of ``step``; ``state`` is the reasoner state the step was generated from."""
        raise NotImplementedError


class SignalBase:
    """Convenience base class: display ``label``, value ``bounds`` and the error direction.

    ``error_direction`` is ``+1`` when a higher value means "more likely an error" (PPL, entropy),
    ``-1`` when a higher value means "more likely correct" (MaxProb, MinProb, CoE) and ``0`` for feature
    vectors that only a probe interprets (PUlSE, ReProbe).
    """

    name: str = ""
    label: str = ""
    requires: tuple[str, ...] = ()
    dim: int = 1
    bounds: tuple[float, float] = (-math.inf, math.inf)
    error_direction: int = 0

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim}, requires={self.requires})"


#: registry name -> signal class (or factory returning a :class:`Signal`); the builtin modules register on first read
SIGNALS: Registry[Callable[..., Signal]] = Registry(
    "signal", builtins=("agents.signals.attention", "agents.signals.hidden", "agents.signals.output",
                        "agents.signals.rsus", "agents.signals.text"))


def register_signal(name: str, *, group: str | None = None, field: str | None = None,
                    scalars: dict[str, int] | None = None, dtype: str = "float32",
                    episode_field: str | None = None) -> Callable[[Callable[..., Signal]], Callable[..., Signal]]:
    """Class decorator: register a signal under ``name`` (also sets ``cls.name`` when unset).

    What it declares is all the env needs to use it — no other table to edit:

    Args:
        group: the ``EnvConfig.signals`` entry that turns it on (``None``: usable by name only, e.g. a probe input).
        field: the observation field its vector goes into (default: ``group``); signals sharing a field are
            concatenated in registration order.
        scalars: scalar name -> index into its vector, reported in ``info["signals"]`` (threshold triggers
            read these).
        dtype: the field's dtype in observations and cache records (``float16`` for large embeddings).
        episode_field: an extra observation field holding this signal's value at the episode's first step
            (kept for the whole episode: the question's embedding is the context embedding of step 1).
    """
    info = {"group": group, "field": (field or group) if group else None, "scalars": dict(scalars or {}),
            "dtype": dtype, "episode_field": episode_field}

    def deco(cls: Callable[..., Signal]) -> Callable[..., Signal]:
        if isinstance(cls, type) and not cls.__dict__.get("name"):
            cls.name = name  # type: ignore[attr-defined]
            if not cls.__dict__.get("label"):
                cls.label = name  # type: ignore[attr-defined]
        return SIGNALS.register(name, cls, **info)

    return deco


def _resolve(name: str) -> Callable[..., Signal]:
    return SIGNALS.get(name)


def make_signal(name: str, context: dict[str, Any] | None = None, **options: Any) -> Signal:
    """Instantiate a registered signal.

    Args:
        name: registry name or ``"package.module:Class"``.
        context: model facts (``n_layers``, ``hidden_size``, ``model_id``); passed only to the
            constructor arguments that accept them.
        **options: constructor options of that signal.
    """
    factory = _resolve(name)
    ctx = dict(context or {})
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature
        params = {}
    accepts_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    extra = {k: v for k, v in ctx.items() if k not in options and (accepts_kw or k in params)}
    try:
        return factory(**options, **extra)
    except TypeError as e:
        raise ValueError(f"signal '{name}': bad options {sorted(options)} ({e})") from e


def available_signals() -> list[str]:
    """Every registered signal name."""
    return sorted(SIGNALS.names())
