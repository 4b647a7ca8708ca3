"""Cost / accuracy operating points (retrieval calls per question vs accuracy), e.g. from a threshold sweep.

* :func:`pareto_frontier`: the methods no other beats on both axes;
* :func:`accuracy_at_budget`: a curve's accuracy at a retrieval budget (the upper hull, interpolated);
* :func:`dominance`: where one curve is above another, in words.

Re-exported by :mod:`eval.stats`, the one place evaluation code imports its statistics from.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from eval.stats.inputs import _as_1d, _as_points

__all__ = ["accuracy_at_budget", "dominance", "pareto_frontier"]

log = logging.getLogger("eval.stats")

#: two accuracies closer than this are treated as equal by :func:`dominance`
_TIE_TOL = 1e-9


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
