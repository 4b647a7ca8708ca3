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
  (retrieval calls per question vs accuracy), e.g. from a threshold sweep (defined in :mod:`eval.stats.frontier`).
* :func:`compare_methods`: all of the above for several methods against one reference.

scipy is imported inside the functions that need it.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from eval.stats.frontier import accuracy_at_budget, dominance, pareto_frontier
from eval.stats.inputs import _as_1d, _as_correct, _check_bootstrap_args, _same_length
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
    (e.g. learned vs the best fixed trigger, with the cache oracle as the ceiling: docs/design.md §8's oracle-gap
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
