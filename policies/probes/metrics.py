"""Detection metrics in numpy (DESIGN §8): AUROC, PR-AUC, F1 / precision / recall, bootstrap CI, Youden's J.

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
from scipy.stats import rankdata


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


def bootstrap_auroc_ci(labels, scores, groups=None, n_boot: int = 1000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of AUROC, resampling whole groups (questions) with replacement.

    Args:
        labels, scores: per step.
        groups: per-step group ids (question ids); ``None`` resamples steps.
        n_boot: resamples (replicates with a single class are skipped).
        seed: RNG seed (fixed: the same call always gives the same interval).
        level: coverage.
    """
    y, s = _xy(labels, scores)
    g = np.arange(y.size) if groups is None else np.asarray(groups)
    uniq, inv = np.unique(g, return_inverse=True)
    members = [np.nonzero(inv == i)[0] for i in range(uniq.size)]
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        pick = rng.integers(0, uniq.size, uniq.size)
        idx = np.concatenate([members[i] for i in pick])
        v = auroc(y[idx], s[idx])
        if not math.isnan(v):
            vals.append(v)
    if not vals:
        return math.nan, math.nan
    lo, hi = np.percentile(vals, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


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
