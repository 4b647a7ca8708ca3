"""Detection metrics in numpy (docs/design.md §8): AUROC, PR-AUC, ROC curve, F1 / precision / recall, Youden's J, and
the resampling they share: grouped (question-level) bootstrap indices and a NaN-dropping percentile interval.

They live here, below eval, because probe fitting (this layer) needs AUROC; evaluation code imports them via
:mod:`eval.stats`.

Convention: ``labels`` are 1 for an erroneous step (the positive class) and ``scores`` are "higher = more
likely an error"; pass ``higher_is_error=False`` to :func:`evaluate_detector` for signals such as MaxProb,
MinProb or CoE where higher means "more likely correct".

Example:
    >>> auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.75
    >>> round(average_precision([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), 4)
    0.8333
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _xy(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels).astype(bool).reshape(-1)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.shape != s.shape:
        raise ValueError(f"labels and scores differ in length ({y.size} vs {s.size})")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or inf")
    return y, s


def auroc(labels, scores) -> float:
    """Area under the ROC curve (Mann–Whitney U with average ranks for ties); NaN with a single class."""
    y, s = _xy(labels, scores)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    from scipy.stats import rankdata  # here, not at import: eval.stats re-exports this module

    r = rankdata(s)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def average_precision(labels, scores) -> float:
    """PR-AUC as average precision: Σ_n (R_n − R_{n−1}) · P_n over distinct score thresholds."""
    y, s = _xy(labels, scores)
    n_pos = int(y.sum())
    if n_pos == 0:
        return math.nan
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]  # last index of every distinct score
    tp = np.cumsum(y)[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def binary_stats(labels, predicted) -> dict[str, float]:
    """Precision, recall and F1 of hard predictions (0 when undefined)."""
    y = np.asarray(labels).astype(bool).reshape(-1)
    p = np.asarray(predicted).astype(bool).reshape(-1)
    tp = int((y & p).sum())
    fp = int((~y & p).sum())
    fn = int((y & ~p).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def youden_threshold(labels, scores) -> float:
    """The threshold ``t`` (predict error when ``score >= t``) maximising Youden's J = TPR − FPR.

    Candidates are the distinct scores; ties in J go to the highest threshold (fewest alarms).
    NaN with a single class.
    """
    y, s = _xy(labels, scores)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s_sorted))[0], s.size - 1]
    tpr = np.cumsum(y_sorted)[last] / n_pos
    fpr = np.cumsum(~y_sorted)[last] / n_neg
    return float(s_sorted[last][int(np.argmax(tpr - fpr))])


def roc_curve(y, o) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates over every distinct threshold of oriented scores ``o`` (higher = error),
    each starting at 0.

    Example:
        >>> [a.tolist() for a in roc_curve(np.array([0, 1, 1]), np.array([0.2, 0.9, 0.2]))]
        [[0.0, 0.0, 1.0], [0.0, 0.5, 1.0]]
    """
    y, o = np.asarray(y), np.asarray(o)
    order = np.argsort(-o, kind="mergesort")
    s, yy = o[order], y[order].astype(bool)
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    tpr = np.cumsum(yy)[last] / max(1, yy.sum())
    fpr = np.cumsum(~yy)[last] / max(1, (~yy).sum())
    return np.r_[0.0, fpr], np.r_[0.0, tpr]


def group_bootstrap_indices(groups, n_boot: int, seed: int) -> list[np.ndarray]:
    """``n_boot`` resamples of item indices, drawing whole groups (e.g. questions) with replacement.

    Groups are ordered by their ``str`` form; a group's members keep their input order. The same
    ``(groups, n_boot, seed)`` always gives the same resamples.

    Example:
        >>> [len(i) % 2 for i in group_bootstrap_indices(["a", "a", "b", "b"], 3, seed=0)]
        [0, 0, 0]
    """
    uniq, inv = np.unique(np.asarray(groups).astype(str), return_inverse=True)
    order = np.argsort(inv, kind="stable")
    starts = np.r_[0, np.cumsum(np.bincount(inv, minlength=uniq.size))]
    members = [order[starts[i]: starts[i + 1]] for i in range(uniq.size)]
    rng = np.random.default_rng(seed)
    return [np.concatenate([members[i] for i in rng.integers(0, uniq.size, uniq.size)]) for _ in range(n_boot)]


def percentile_interval(values, level: float = 0.95) -> tuple[float, float]:
    """The ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles (linear interpolation) of ``values``,
    NaN values dropped; ``(nan, nan)`` when none is left.

    Example:
        >>> percentile_interval([0.0, 1.0, float("nan"), 2.0], level=0.5)
        (0.5, 1.5)
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return math.nan, math.nan
    lo, hi = np.percentile(v, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_auroc_ci(labels, scores, groups=None, n_boot: int = 1000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of AUROC, resampling whole groups (questions) with replacement
    (:func:`group_bootstrap_indices`, :func:`percentile_interval`).

    Args:
        labels, scores: per step.
        groups: per-step group ids (question ids); ``None`` resamples steps.
        n_boot: resamples (replicates with a single class are skipped).
        seed: RNG seed (fixed: the same call always gives the same interval).
        level: coverage.
    """
    y, s = _xy(labels, scores)
    g = np.arange(y.size) if groups is None else np.asarray(groups)
    return percentile_interval([auroc(y[idx], s[idx]) for idx in group_bootstrap_indices(g, n_boot, seed)], level)


def evaluate_detector(labels, scores, groups=None, threshold: float | None = None, higher_is_error: bool = True,
                      n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """AUROC (+ group-bootstrap 95% CI), PR-AUC, and precision / recall / F1 at a threshold.

    Args:
        labels: 1 = erroneous step.
        scores: detector scores.
        groups: question id of every step (for the bootstrap).
        threshold: decision threshold in the score's own units (fire when ``score >= t``, or ``<= t``
            when ``higher_is_error`` is False); ``None`` = Youden's J on these data (optimistic: pick it on
            a dev split and pass it here for test numbers).
        higher_is_error: orientation of the scores.
        n_boot: bootstrap resamples (0 = no CI).
        seed: bootstrap seed.
    """
    y, s = _xy(labels, scores)
    o = s if higher_is_error else -s
    if threshold is None:
        t = youden_threshold(y, o)
        threshold = t if higher_is_error else -t
    t_o = threshold if higher_is_error else -threshold
    fired = o >= t_o if not math.isnan(t_o) else np.zeros_like(y)
    ci = bootstrap_auroc_ci(y, o, groups, n_boot, seed) if n_boot else (math.nan, math.nan)
    return {"n": int(y.size), "positives": int(y.sum()), "auroc": auroc(y, o), "auroc_ci95": list(ci),
            "pr_auc": average_precision(y, o), "threshold": float(threshold), "fire_rate": float(fired.mean()),
            **binary_stats(y, fired)}
