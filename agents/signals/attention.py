"""DRAGIN's RIND (DESIGN §4): token importance × uncertainty × step length; needs attentions.

For content token ``i`` of a step with ``n`` content tokens:

* ``a_i`` — the last-layer attention the token *receives*: for the sequence position ``p_i`` holding the
  token as input, ``max_{q > p_i} mean_heads A[q, p_i]`` (rows = queries, columns = keys; DRAGIN's order: the
  mean over heads first, then the max over later queries); a token with no later query receives 0. The
  generation pass computes the same quantity over the queries it feeds (:mod:`agents.reasoners.stepgen`:
  the step's later tokens, not its end token) — one definition, tested equal. A backend stores these raw values in ``step.meta["attn_received"]`` (length
  ``n``), e.g. computed with :func:`attention_received` from an eager-attention forward pass.
* ``ā_i = a_i / Σ_j a_j`` (normalised in the step; uniform ``1/n`` if every ``a_i`` is 0);
* ``H_i`` — entropy of the predictive distribution that generated the token (``step.entropies[i]``);
* ``s_i = ā_i · H_i · n``; the signal is ``max_i s_i`` (DRAGIN fires when it exceeds θ).

Example:
    >>> import numpy as np
    >>> A = np.array([[1., 0, 0], [.6, .4, 0], [.2, .5, .3]])   # one head, 3 positions
    >>> attention_received(A, [0, 1]).tolist()                  # max over later queries
    [0.6, 0.5]
    >>> rind_scores(np.array([0.6, 0.5]), np.array([1.0, 2.0])).round(4).tolist()
    [1.0909, 1.8182]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.reasoners.base import Step
from agents.signals.base import SignalBase, SignalUnavailable, register_signal


def attention_received(attn: np.ndarray, positions: list[int] | np.ndarray) -> np.ndarray:
    """Per-token attention received: max over later query positions, mean over heads.

    Args:
        attn: ``[heads, T, T]`` or ``[T, T]`` last-layer attention weights (query, key).
        positions: sequence positions of the step's content tokens.
    """
    A = np.asarray(attn, dtype=np.float64)
    if A.ndim == 3:
        A = A.mean(0)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"attention must be [heads, T, T] or [T, T], got {np.shape(attn)}")
    out = np.zeros(len(positions))
    for i, p in enumerate(positions):
        later = A[p + 1:, p]
        out[i] = later.max() if later.size else 0.0
    return out


def rind_scores(attn_received: np.ndarray, entropies: np.ndarray) -> np.ndarray:
    """``s_i = ā_i · H_i · n`` over the ``n`` content tokens (``entropies`` may carry the end token too)."""
    a = np.asarray(attn_received, dtype=np.float64)
    n = a.size
    if n == 0:
        raise SignalUnavailable("RIND needs at least one content token")
    H = np.asarray(entropies, dtype=np.float64)
    if H.size < n:
        raise ValueError(f"RIND: {n} attention values but only {H.size} token entropies")
    total = a.sum()
    a_bar = a / total if total > 0 else np.full(n, 1.0 / n)
    return a_bar * H[:n] * n


@register_signal("rind", group="rind", scalars={"rind": 0})
class RIND(SignalBase):
    """DRAGIN RIND: ``max_i ā_i · H_i · n`` from ``step.meta["attn_received"]`` and ``step.entropies``."""

    label = "DRAGIN"
    requires = ("attentions", "logprobs")
    bounds = (0.0, math.inf)
    error_direction = 1

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        a = step.meta.get("attn_received")
        if a is None or step.entropies is None:
            raise SignalUnavailable(f"step {step.index} has no attn_received / entropies for RIND")
        return np.array([rind_scores(a, step.entropies).max()], dtype=np.float32)
