"""The signal interface (docs/design.md §3) and the registry of signals by name.

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
                    episode_field: str | None = None, scalar_labels: dict[str, tuple[str, int]] | None = None,
                    ) -> Callable[[Callable[..., Signal]], Callable[..., Signal]]:
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
        scalar_labels: scalar name -> ``(label, error_direction)`` for a scalar that is neither this signal
            nor a registered signal of its own (RSUS's components); the others take the ``label`` and
            ``error_direction`` of the signal of their name (:func:`signal_meta`).
    """
    info = {"group": group, "field": (field or group) if group else None, "scalars": dict(scalars or {}),
            "dtype": dtype, "episode_field": episode_field, "scalar_labels": dict(scalar_labels or {})}

    def deco(cls: Callable[..., Signal]) -> Callable[..., Signal]:
        if isinstance(cls, type) and not cls.__dict__.get("name"):
            cls.name = name  # type: ignore[attr-defined]
            if not cls.__dict__.get("label"):
                cls.label = name  # type: ignore[attr-defined]
        return SIGNALS.register(name, cls, **info)

    return deco


def signal_meta(name: str) -> dict[str, Any]:
    """The display ``label`` and ``error_direction`` (+1: higher = more likely an error, −1: higher = more likely
    correct, 0: a feature vector only a probe reads) of a signal or scalar — the one source every table reads
    (detection benchmark, probe references, benefit labels, a threshold method's default direction). A scalar
    takes what the signal that reports it declared in ``scalar_labels``, else the signal of its own name's class
    attributes (``ppl`` → :class:`~agents.signals.output.PPL`), else its reporting signal's when it has that
    signal's name. Unknown: :class:`KeyError` naming it."""
    SIGNALS.names()  # the builtins
    for owner in SIGNALS.names():
        declared = SIGNALS.info(owner).get("scalar_labels", {})
        if name in declared:
            label, direction = declared[name]
            return {"label": label, "error_direction": int(direction), "signal": owner}
    if name in SIGNALS:
        cls = SIGNALS.get(name)
        return {"label": getattr(cls, "label", "") or name, "error_direction": int(getattr(cls, "error_direction", 0)),
                "signal": name}
    raise KeyError(f"signal or scalar '{name}' is not registered (registered signals: {', '.join(SIGNALS.names())})")


def retrieve_direction(name: str) -> str | None:
    """``'above'`` / ``'below'``: the side of a threshold on which the signal or scalar ``name`` flags a likely
    error (its declared ``error_direction``); None when it declares none or is not registered."""
    try:
        d = signal_meta(name)["error_direction"]
    except KeyError:
        return None
    return "above" if d > 0 else "below" if d < 0 else None


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
