"""Input checks of the question-level statistics (:mod:`eval.stats`, :mod:`eval.stats.frontier`): every array is 1-D,
finite where it must be, and aligned on the same questions; errors name the argument."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _as_1d(x: Any, name: str) -> np.ndarray:
    """``x`` as a non-empty, finite, 1-D float array; ValueError naming ``name`` otherwise."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a 1-D array of numbers: {e}") from e
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same length (aligned on the same questions), "
                         f"got {a.size} and {b.size}")


def _check_bootstrap_args(n_resamples: int, ci: float) -> None:
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")


def _as_correct(x: Any, name: str, threshold: float) -> np.ndarray:
    """Boolean correctness: a bool array as is, numbers (0/1 or qualities) as ``x >= threshold``."""
    arr = np.asarray(x)
    if arr.dtype == bool:
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
        if arr.size == 0:
            raise ValueError(f"{name} is empty")
        return arr
    return _as_1d(arr, name) >= threshold


def _as_points(points: Sequence[tuple[float, float]], name: str) -> np.ndarray:
    """``points`` as an ``(n, 2)`` finite float array (n may be 0)."""
    arr = np.asarray(points, dtype=float)
    if arr.size == 0:
        return np.empty((0, 2))
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{name} must be a list of (calls, accuracy) pairs, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr
