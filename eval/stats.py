"""Question-level statistics for comparing retrieval policies on a benchmark.

This module is the one place evaluation code imports resampling, confidence intervals and ROC / detection
metrics from. The grouped bootstrap (:func:`group_bootstrap_indices`), the percentile interval
(:func:`percentile_interval`), :func:`roc_curve`, :func:`auroc` and the other detection metrics are defined in
:mod:`policies.probes.metrics` (probe fitting needs them, below eval in the layer order) and re-exported here.

Every per-question array passed to these functions is aligned on the same questions (index ``i`` is the
same question for every method), so comparisons are *paired*: the bootstrap resamples question indices
once and applies them to both methods, and McNemar's test counts the questions on which exactly one of the
two methods is right.

* :func:`bootstrap_mean_ci`, :func:`paired_bootstrap`: percentile bootstrap of a mean / a paired difference.
* :func:`group_bootstrap_indices`, :func:`percentile_interval`: question-level (grouped) resamples and
  the NaN-dropping percentile interval of replicate statistics.
* :func:`auroc`, :func:`average_precision`, :func:`roc_curve`, :func:`binary_stats`,
  :func:`youden_threshold`, :func:`bootstrap_auroc_ci`, :func:`evaluate_detector`: detection metrics.
* :func:`mcnemar_exact`: exact (binomial) McNemar test on per-question correctness.
* :func:`holm`: Holm–Bonferroni step-down adjustment of a family of p-values.
* :func:`pareto_frontier`, :func:`accuracy_at_budget`, :func:`dominance`: cost/accuracy operating points
  (retrieval calls per question vs accuracy), e.g. from a threshold sweep.
* :func:`compare_methods`: all of the above for several methods against one reference.

scipy is imported inside the functions that need it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from policies.probes.metrics import (
    auroc,
    average_precision,
    binary_stats,
    bootstrap_auroc_ci,
    evaluate_detector,
    group_bootstrap_indices,
    percentile_interval,
    roc_curve,
    youden_threshold,
)

__all__ = [
    # detection metrics and resampling (defined in policies.probes.metrics)
    "auroc", "average_precision", "binary_stats", "bootstrap_auroc_ci", "evaluate_detector",
    "group_bootstrap_indices", "percentile_interval", "roc_curve", "youden_threshold",
    # question-level comparisons
    "bootstrap_mean_ci", "paired_bootstrap", "gap_fraction", "mcnemar_exact", "holm", "pareto_frontier",
    "accuracy_at_budget", "dominance", "compare_methods",
]

log = logging.getLogger(__name__)

#: most index entries drawn at once by the bootstrap (chunk of resamples x questions): ~8 MB of int64
_MAX_CHUNK_ELEMENTS = 1 << 20
#: two accuracies closer than this are treated as equal by :func:`dominance`
_TIE_TOL = 1e-9


# ----------------------------------------------------------------------------------------------------------
# input checks


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


# ----------------------------------------------------------------------------------------------------------
# bootstrap


def _resampled_means(x: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_resamples`` bootstrap resamples of ``x``, drawn in chunks to bound memory."""
    n = x.size
    chunk = max(1, min(n_resamples, _MAX_CHUNK_ELEMENTS // n))
    out = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = x[idx].mean(axis=1)
    return out


def _percentile_ci(stats: np.ndarray, ci: float) -> tuple[float, float]:
    return percentile_interval(stats, ci)


def bootstrap_mean_ci(x: Any, n_resamples: int = 10_000, seed: int = 0, ci: float = 0.95) -> dict:
    """Percentile-bootstrap confidence interval of the mean of per-question values.

    Args:
        x: per-question values (e.g. quality in [0, 1], or 0/1 correctness).
        n_resamples: number of bootstrap resamples.
        seed: seed of the ``numpy.random.Generator``; the same seed gives the same interval.
        ci: confidence level, e.g. 0.95 for a 95% interval.

    Returns:
        ``{"mean": float, "lo": float, "hi": float}``: the sample mean and the ``(1-ci)/2`` and
        ``(1+ci)/2`` quantiles of the resampled means.

    Raises:
        ValueError: ``x`` is empty, not 1-D or not finite, or ``n_resamples`` / ``ci`` are out of range.

    Example:
        >>> bootstrap_mean_ci([1.0, 1.0, 1.0], n_resamples=100)
        {'mean': 1.0, 'lo': 1.0, 'hi': 1.0}
    """
    x = _as_1d(x, "x")
    _check_bootstrap_args(n_resamples, ci)
    mean = float(x.mean())
    if np.all(x == x[0]):  # constant: every resample has the same mean (avoid rounding noise)
        return {"mean": float(x[0]), "lo": float(x[0]), "hi": float(x[0])}
    means = _resampled_means(x, int(n_resamples), np.random.default_rng(seed))
    lo, hi = _percentile_ci(means, ci)
    return {"mean": mean, "lo": lo, "hi": hi}


def paired_bootstrap(a: Any, b: Any, n_resamples: int = 10_000, seed: int = 0, ci: float = 0.95) -> dict:
    """Paired bootstrap of ``mean(a) - mean(b)`` over the same questions.

    Each resample draws question indices once and uses them for both methods, i.e. it resamples the
    per-question differences ``d = a - b``. The two-sided p-value is
    ``min(1, 2 * min(frac(d* <= 0), frac(d* >= 0)))`` over the resampled mean differences ``d*``, floored
    at ``1 / (n_resamples + 1)`` (a bootstrap cannot show a smaller p), except that it is exactly 1.0 when
    every per-question difference is zero.

    Args:
        a: per-question values of method A.
        b: per-question values of method B, aligned with ``a``.
        n_resamples: number of bootstrap resamples.
        seed: seed of the ``numpy.random.Generator``.
        ci: confidence level of the interval.

    Returns:
        ``{"diff", "lo", "hi", "p_value", "n"}``: the observed difference of means, the percentile interval
        of the resampled differences, the bootstrap p-value and the number of questions.

    Raises:
        ValueError: an array is empty, not 1-D or not finite, the lengths differ, or ``n_resamples`` /
            ``ci`` are out of range.

    Example:
        >>> r = paired_bootstrap([1.0, 0.5, 1.0], [0.5, 0.0, 0.5], n_resamples=100)
        >>> r["diff"], r["lo"], r["hi"], r["p_value"] == 1 / 101
        (0.5, 0.5, 0.5, True)
    """
    a = _as_1d(a, "a")
    b = _as_1d(b, "b")
    _same_length(a, b, "a", "b")
    _check_bootstrap_args(n_resamples, ci)
    d = a - b
    n = int(d.size)
    if np.all(d == 0.0):
        return {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p_value": 1.0, "n": n}
    floor = 1.0 / (int(n_resamples) + 1)
    if np.all(d == d[0]):  # constant nonzero difference: every resample equals it
        v = float(d[0])
        return {"diff": v, "lo": v, "hi": v, "p_value": floor, "n": n}
    diffs = _resampled_means(d, int(n_resamples), np.random.default_rng(seed))
    lo, hi = _percentile_ci(diffs, ci)
    p = min(1.0, 2.0 * min(float(np.mean(diffs <= 0.0)), float(np.mean(diffs >= 0.0))))
    return {"diff": float(d.mean()), "lo": lo, "hi": hi, "p_value": max(p, floor), "n": n}


def gap_fraction(method: Any, baseline: Any, ceiling: Any, n_resamples: int = 10_000, seed: int = 0,
                 ci: float = 0.95) -> dict:
    """Fraction of the gap between a baseline and a ceiling that a method closes, with a paired bootstrap CI.

    ``f = (mean(method) − mean(baseline)) / (mean(ceiling) − mean(baseline))`` over the same questions
    (e.g. learned vs the best fixed trigger, with the cache oracle as the ceiling: DESIGN §8's oracle-gap
    fraction). Each resample draws question indices once for all three. Resamples whose gap is 0 are
    dropped from the interval; with no gap at all the fraction is NaN.

    Example:
        >>> r = gap_fraction([1.0, 0.5, 1.0, 0.5], [0.0, 0.0, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0], n_resamples=200)
        >>> round(r["fraction"], 3), r["lo"] <= r["fraction"] <= r["hi"]
        (0.667, True)
    """
    a, b, c = _as_1d(method, "method"), _as_1d(baseline, "baseline"), _as_1d(ceiling, "ceiling")
    _same_length(a, b, "method", "baseline")
    _same_length(a, c, "method", "ceiling")
    _check_bootstrap_args(n_resamples, ci)
    gap = float(c.mean() - b.mean())
    frac = float((a.mean() - b.mean()) / gap) if gap != 0 else float("nan")
    rng = np.random.default_rng(seed)
    n = a.size
    idx = rng.integers(0, n, size=(int(n_resamples), n))
    num = (a - b)[idx].mean(axis=1)
    den = (c - b)[idx].mean(axis=1)
    ok = den != 0
    if not ok.any():
        return {"fraction": frac, "lo": float("nan"), "hi": float("nan"), "gap": gap, "n": int(n)}
    lo, hi = _percentile_ci(num[ok] / den[ok], ci)
    return {"fraction": frac, "lo": lo, "hi": hi, "gap": gap, "n": int(n)}


# ----------------------------------------------------------------------------------------------------------
# McNemar and Holm


def mcnemar_exact(a_correct: Any, b_correct: Any, threshold: float = 0.5) -> dict:
    """Exact two-sided McNemar test on paired per-question correctness.

    ``b`` counts questions A gets right and B wrong, ``c`` the reverse. Under the null each discordant
    question is a fair coin, so ``p = min(1, 2 * BinomCDF(min(b, c); b + c, 0.5))``, and ``p = 1`` when
    there are no discordant questions.

    Args:
        a_correct: per-question correctness of A: booleans, 0/1, or float qualities (see ``threshold``).
        b_correct: the same for B, aligned with ``a_correct``.
        threshold: non-boolean values count as correct when ``>= threshold`` (0/1 work with the default).

    Returns:
        ``{"b": int, "c": int, "n_discordant": int, "p_value": float}``.

    Raises:
        ValueError: an array is empty, not 1-D or not finite, or the lengths differ.

    Example:
        >>> r = mcnemar_exact([1] * 10 + [0] * 2, [0] * 10 + [1] * 2)
        >>> r["b"], r["c"], round(r["p_value"], 5)
        (10, 2, 0.03857)
    """
    from scipy.stats import binom

    a = _as_correct(a_correct, "a_correct", threshold)
    b_ = _as_correct(b_correct, "b_correct", threshold)
    _same_length(a, b_, "a_correct", "b_correct")
    b = int(np.sum(a & ~b_))
    c = int(np.sum(~a & b_))
    n = b + c
    p = 1.0 if n == 0 else min(1.0, 2.0 * float(binom.cdf(min(b, c), n, 0.5)))
    return {"b": b, "c": c, "n_discordant": n, "p_value": p}


def holm(pvalues: dict[str, float], alpha: float = 0.05) -> dict[str, dict]:
    """Holm–Bonferroni step-down adjustment of a family of p-values.

    With the ``m`` p-values sorted ascending (ties keep their input order), the adjusted value of the
    ``i``-th (0-based) is ``max_{j <= i} min(1, (m - j) * p_(j))``, monotone in the sorted order and capped at
    1. A hypothesis is rejected when its adjusted p-value is ``<= alpha``, which is exactly Holm's procedure.

    Args:
        pvalues: hypothesis name -> raw p-value in [0, 1].
        alpha: family-wise error rate.

    Returns:
        name -> ``{"p_value": raw, "p_adjusted": float, "reject": bool}``, in the input order. An empty
        family gives an empty dict.

    Raises:
        ValueError: a p-value is not in [0, 1], or ``alpha`` is not in (0, 1).

    Example:
        >>> r = holm({"a": 0.01, "b": 0.04, "c": 0.03})
        >>> {k: (round(v["p_adjusted"], 4), v["reject"]) for k, v in r.items()}
        {'a': (0.03, True), 'b': (0.06, False), 'c': (0.06, False)}
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    for k, p in pvalues.items():
        if not (isinstance(p, int | float | np.floating | np.integer) and 0.0 <= p <= 1.0):
            raise ValueError(f"pvalues[{k!r}] must be a number in [0, 1], got {p!r}")
    names = list(pvalues)
    m = len(names)
    order = sorted(range(m), key=lambda i: pvalues[names[i]])  # stable: ties keep input order
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[names[i]])))
        adjusted[names[i]] = running
    return {k: {"p_value": float(pvalues[k]), "p_adjusted": adjusted[k], "reject": adjusted[k] <= alpha}
            for k in names}


# ----------------------------------------------------------------------------------------------------------
# cost / accuracy operating points


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated ``(calls, accuracy)`` points: fewer calls and higher accuracy are better.

    A point is dropped when another has calls ``<=`` and accuracy ``>=`` with at least one strict; of
    several identical points only the first index is kept.

    Args:
        points: ``(calls, accuracy)`` pairs (x = retrieval calls per question, y = accuracy).

    Returns:
        Indices into ``points`` of the frontier, sorted by calls (so accuracy is strictly increasing).
        An empty input gives an empty list.

    Raises:
        ValueError: ``points`` is not a list of pairs or holds NaN/infinite values.

    Example:
        >>> pareto_frontier([(1.0, 0.6), (0.5, 0.5), (1.0, 0.55), (2.0, 0.6), (0.5, 0.5)])
        [1, 0]
    """
    arr = _as_points(points, "points")
    if arr.shape[0] == 0:
        return []
    # calls ascending, then accuracy descending, then index ascending (first of duplicates wins)
    order = np.lexsort((np.arange(arr.shape[0]), -arr[:, 1], arr[:, 0]))
    keep: list[int] = []
    best = -np.inf
    for i in order:
        if arr[i, 1] > best:
            keep.append(int(i))
            best = arr[i, 1]
    return keep


def _upper_hull(xy: np.ndarray) -> np.ndarray:
    """Upper concave hull of frontier points sorted by x with strictly increasing y."""
    hull: list[np.ndarray] = []
    for p in xy:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            # drop the middle point when it lies on or below the chord from hull[-2] to p
            if (y2 - y1) * (p[0] - x1) <= (p[1] - y1) * (x2 - x1):
                hull.pop()
            else:
                break
        hull.append(p)
    return np.asarray(hull)


def accuracy_at_budget(curve: Sequence[tuple[float, float]], budget: float,
                       interpolation: str = "hull") -> float | None:
    """Best accuracy a method reaches with at most ``budget`` retrieval calls per question.

    ``curve`` holds the method's operating points, e.g. one per threshold of a sweep. Mixing two operating
    points (running threshold t1 on a random fraction of the questions and t2 on the rest) realises, in
    expectation, every point on the segment between them. So with the default ``interpolation="hull"`` the
    achievable accuracy at a budget is the upper concave hull of the curve's Pareto frontier, evaluated at
    ``budget`` by linear interpolation between consecutive hull vertices, and flat (the best accuracy)
    beyond the largest call count. On a concave frontier this equals interpolating between consecutive
    frontier points; where the frontier has a dip, the hull bridges it, as a randomised mix would.

    Other choices: ``"frontier"`` interpolates between consecutive Pareto points without bridging dips;
    ``"step"`` allows no mixing (the best single point with calls ``<= budget``).

    Args:
        curve: ``(calls, accuracy)`` operating points of one method.
        budget: calls per question allowed.
        interpolation: ``"hull"`` (default), ``"frontier"`` or ``"step"``.

    Returns:
        The accuracy, or None when every point needs more than ``budget`` calls.

    Raises:
        ValueError: ``curve`` is empty or malformed, ``budget`` is not finite, or ``interpolation`` is unknown.

    Example:
        >>> curve = [(0.0, 0.4), (1.0, 0.6), (2.0, 0.7)]
        >>> accuracy_at_budget(curve, 0.5), accuracy_at_budget(curve, 5.0), accuracy_at_budget(curve, -1.0)
        (0.5, 0.7, None)
    """
    if interpolation not in ("hull", "frontier", "step"):
        raise ValueError(f"interpolation must be 'hull', 'frontier' or 'step', got {interpolation!r}")
    arr = _as_points(curve, "curve")
    if arr.shape[0] == 0:
        raise ValueError("curve is empty")
    if not np.isfinite(budget):
        raise ValueError(f"budget must be finite, got {budget!r}")
    front = arr[pareto_frontier(arr.tolist())]  # x ascending, y strictly increasing
    if budget < front[0, 0]:
        return None
    if interpolation == "step":
        return float(front[front[:, 0] <= budget, 1].max())
    pts = _upper_hull(front) if interpolation == "hull" else front
    return float(np.interp(budget, pts[:, 0], pts[:, 1]))


def _runs(budgets: np.ndarray, mask: np.ndarray) -> list[tuple[float, float]]:
    """``[(first budget, last budget)]`` of each run of consecutive True entries of ``mask``."""
    out: list[tuple[float, float]] = []
    start = None
    for i, m in enumerate(mask):
        if m and start is None:
            start = i
        if not m and start is not None:
            out.append((float(budgets[start]), float(budgets[i - 1])))
            start = None
    if start is not None:
        out.append((float(budgets[start]), float(budgets[-1])))
    return out


def _fmt(intervals: list[tuple[float, float]]) -> str:
    return ", ".join(f"[{lo:.2f}, {hi:.2f}]" for lo, hi in intervals)


def dominance(curve_a: Sequence[tuple[float, float]], curve_b: Sequence[tuple[float, float]],
              budgets: Sequence[float] | None = None, name_a: str = "A", name_b: str = "B") -> dict:
    """Compare two methods' accuracy-vs-budget curves on a grid of budgets.

    Both curves are evaluated with :func:`accuracy_at_budget` (default hull interpolation). At each budget
    where both are defined, A is better when ``acc_a - acc_b > 1e-9``, B when ``acc_b - acc_a > 1e-9``, and
    they tie otherwise. The default grid is 50 budgets spanning the overlap of the two curves' call ranges
    ``[max(min calls), min(max calls)]``; when the ranges do not overlap it spans
    ``[max(min calls), max(max calls)]`` (the cheaper curve is flat there at its best accuracy).

    Args:
        curve_a: ``(calls, accuracy)`` operating points of A.
        curve_b: the same for B.
        budgets: budgets to evaluate (calls per question); default as above.
        name_a: A's name in the summary.
        name_b: B's name in the summary.

    Returns:
        ``{"budgets", "acc_a", "acc_b", "a_better_intervals", "b_better_intervals", "summary"}``: the grid,
        each method's accuracy per budget (None where below all of its points), the ``(lo, hi)`` budget runs
        where A (resp. B) is strictly better, and a one-sentence summary.

    Raises:
        ValueError: a curve is empty or malformed, or ``budgets`` is empty or not finite.

    Example:
        >>> r = dominance([(0.0, 0.5), (1.0, 0.8)], [(0.0, 0.4), (1.0, 0.7)], budgets=[0.0, 0.5, 1.0])
        >>> r["summary"]
        'A dominates B at every budget in [0.00, 1.00] calls/question'
    """
    a = _as_points(curve_a, "curve_a")
    b = _as_points(curve_b, "curve_b")
    if a.shape[0] == 0:
        raise ValueError("curve_a is empty")
    if b.shape[0] == 0:
        raise ValueError("curve_b is empty")
    if budgets is None:
        lo = max(a[:, 0].min(), b[:, 0].min())
        hi = min(a[:, 0].max(), b[:, 0].max())
        if hi < lo:
            log.info("dominance: call ranges of %s and %s do not overlap; grid up to the larger maximum",
                     name_a, name_b)
            hi = max(a[:, 0].max(), b[:, 0].max())
        grid = np.linspace(lo, hi, 50) if hi > lo else np.array([lo])
    else:
        grid = _as_1d(budgets, "budgets")
    acc_a = [accuracy_at_budget(a.tolist(), float(x)) for x in grid]
    acc_b = [accuracy_at_budget(b.tolist(), float(x)) for x in grid]
    defined = np.array([u is not None and v is not None for u, v in zip(acc_a, acc_b)])
    delta = np.array([(u - v) if ok else 0.0 for u, v, ok in zip(acc_a, acc_b, defined)])
    a_mask = defined & (delta > _TIE_TOL)
    b_mask = defined & (delta < -_TIE_TOL)
    a_int, b_int = _runs(grid, a_mask), _runs(grid, b_mask)

    if not defined.any():
        summary = f"{name_a} and {name_b} are not both defined at any budget given"
    else:
        span = f"[{grid[defined].min():.2f}, {grid[defined].max():.2f}]"
        if a_int and b_int:
            summary = f"{name_a} and {name_b} cross: {name_a} better in {_fmt(a_int)}, " \
                      f"{name_b} better in {_fmt(b_int)}"
        elif a_int:
            summary = f"{name_a} dominates {name_b} at every budget in {span} calls/question"
        elif b_int:
            summary = f"{name_b} dominates {name_a} at every budget in {span} calls/question"
        else:
            summary = f"{name_a} and {name_b} are equal at every budget in {span} calls/question"
    return {"budgets": [float(x) for x in grid], "acc_a": acc_a, "acc_b": acc_b,
            "a_better_intervals": a_int, "b_better_intervals": b_int, "summary": summary}


# ----------------------------------------------------------------------------------------------------------
# several methods against a reference


def compare_methods(per_question: dict[str, np.ndarray], reference: str,
                    correct: dict[str, np.ndarray] | None = None, n_resamples: int = 10_000,
                    seed: int = 0, alpha: float = 0.05) -> list[dict]:
    """Compare each method with a reference: paired bootstrap, exact McNemar, Holm over the family.

    Every comparison uses the same ``seed``, hence the same resampled questions (common random numbers).
    The Holm family is the McNemar p-values of all non-reference methods.

    Args:
        per_question: method -> per-question quality, all aligned on the same questions.
        reference: the method every other is compared with; must be a key of ``per_question``.
        correct: method -> per-question correctness (bool or 0/1) for McNemar; default quality ``>= 0.5``.
        n_resamples: bootstrap resamples per comparison.
        seed: bootstrap seed.
        alpha: family-wise error rate of the Holm adjustment.

    Returns:
        One row per non-reference method, in ``per_question`` order, with keys ``method, reference, diff,
        lo, hi, p_bootstrap, b, c, p_mcnemar, p_holm, reject``; ``diff`` is ``mean(method) -
        mean(reference)`` and ``b`` counts questions the method gets right and the reference wrong.

    Raises:
        ValueError: ``reference`` (or a method) is missing, an array is empty/malformed, or lengths differ.

    Example:
        >>> q = {"ref": np.array([0.0, 1.0, 0.0, 1.0]), "new": np.array([1.0, 1.0, 1.0, 1.0])}
        >>> [(r["method"], r["diff"], r["b"], r["c"]) for r in compare_methods(q, "ref", n_resamples=100)]
        [('new', 0.5, 2, 0)]
    """
    if reference not in per_question:
        raise ValueError(f"reference {reference!r} is not a key of per_question ({sorted(per_question)})")
    ref_q = _as_1d(per_question[reference], f"per_question[{reference!r}]")
    if correct is not None:
        missing = [m for m in per_question if m not in correct]
        if missing:
            raise ValueError(f"correct has no entry for {missing}")
        ref_c = _as_correct(correct[reference], f"correct[{reference!r}]", 0.5)
        _same_length(ref_c, ref_q, f"correct[{reference!r}]", f"per_question[{reference!r}]")
    else:
        ref_c = ref_q >= 0.5

    rows: list[dict] = []
    for m, values in per_question.items():
        if m == reference:
            continue
        q = _as_1d(values, f"per_question[{m!r}]")
        _same_length(q, ref_q, f"per_question[{m!r}]", f"per_question[{reference!r}]")
        if correct is not None:
            mc = _as_correct(correct[m], f"correct[{m!r}]", 0.5)
            _same_length(mc, ref_q, f"correct[{m!r}]", f"per_question[{reference!r}]")
        else:
            mc = q >= 0.5
        boot = paired_bootstrap(q, ref_q, n_resamples=n_resamples, seed=seed)
        mcn = mcnemar_exact(mc, ref_c)
        rows.append({"method": m, "reference": reference, "diff": boot["diff"], "lo": boot["lo"],
                     "hi": boot["hi"], "p_bootstrap": boot["p_value"], "b": mcn["b"], "c": mcn["c"],
                     "p_mcnemar": mcn["p_value"]})
        log.debug("%s vs %s: diff %.4f [%.4f, %.4f], McNemar b=%d c=%d p=%.4g", m, reference,
                  boot["diff"], boot["lo"], boot["hi"], mcn["b"], mcn["c"], mcn["p_value"])
    adj = holm({r["method"]: r["p_mcnemar"] for r in rows}, alpha=alpha)
    for r in rows:
        r["p_holm"] = adj[r["method"]]["p_adjusted"]
        r["reject"] = adj[r["method"]]["reject"]
    return rows
