"""Question-level statistics: bootstrap, exact McNemar, Holm, Pareto frontier, accuracy at a budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.stats import (
    accuracy_at_budget,
    bootstrap_mean_ci,
    compare_methods,
    dominance,
    holm,
    mcnemar_exact,
    paired_bootstrap,
    pareto_frontier,
)

# ---------------------------------------------------------------------------------------------- McNemar


def test_mcnemar_hand_example():
    # 10 questions A right / B wrong, 2 the reverse, 5 both right, 3 both wrong
    a = [1] * 10 + [0] * 2 + [1] * 5 + [0] * 3
    b = [0] * 10 + [1] * 2 + [1] * 5 + [0] * 3
    r = mcnemar_exact(a, b)
    assert (r["b"], r["c"], r["n_discordant"]) == (10, 2, 12)
    expected = 2 * (1 + 12 + 66) / 4096
    assert r["p_value"] == pytest.approx(expected)
    assert round(r["p_value"], 4) == 0.0386


def test_mcnemar_symmetric_and_swapped():
    a = np.array([True] * 4 + [False] * 4)
    b = ~a
    r = mcnemar_exact(a, b)
    assert (r["b"], r["c"]) == (4, 4)
    assert r["p_value"] == 1.0
    # swapping the arms swaps b and c but not p
    a2 = [1] * 10 + [0] * 2
    b2 = [0] * 10 + [1] * 2
    assert mcnemar_exact(a2, b2)["p_value"] == pytest.approx(mcnemar_exact(b2, a2)["p_value"])
    assert mcnemar_exact(b2, a2)["b"] == 2


def test_mcnemar_no_discordant():
    r = mcnemar_exact([1, 0, 1], [1, 0, 1])
    assert r == {"b": 0, "c": 0, "n_discordant": 0, "p_value": 1.0}


def test_mcnemar_threshold_on_qualities():
    a = [0.9, 0.6, 0.2, 0.5]
    b = [0.1, 0.4, 0.2, 0.49]
    assert mcnemar_exact(a, b)["b"] == 3  # 0.5 counts as correct at the default threshold
    assert mcnemar_exact(a, b, threshold=0.7)["b"] == 1


# ---------------------------------------------------------------------------------------------- bootstrap


def test_paired_bootstrap_constant_difference():
    rng = np.random.default_rng(1)
    b = rng.random(200)
    a = b + 0.25
    r = paired_bootstrap(a, b, n_resamples=1000, seed=0)
    assert r["diff"] == pytest.approx(0.25)
    assert r["lo"] == pytest.approx(0.25)
    assert r["hi"] == pytest.approx(0.25)
    assert r["p_value"] == pytest.approx(1 / 1001)
    assert r["n"] == 200
    # exactly constant difference takes the shortcut and gives the same answer
    e = paired_bootstrap([1.0, 0.75], [0.75, 0.5], n_resamples=1000)
    assert (e["diff"], e["lo"], e["hi"], e["p_value"]) == (0.25, 0.25, 0.25, 1 / 1001)


def test_paired_bootstrap_identical_arrays():
    x = np.random.default_rng(2).random(100)
    r = paired_bootstrap(x, x.copy(), n_resamples=500)
    assert r == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p_value": 1.0, "n": 100}


def test_paired_bootstrap_noisy_difference():
    rng = np.random.default_rng(3)
    b = (rng.random(400) < 0.5).astype(float)
    a = np.where(rng.random(400) < 0.2, 1.0, b)  # A fixes ~20% of questions
    r = paired_bootstrap(a, b, n_resamples=2000, seed=0)
    assert r["lo"] < r["diff"] < r["hi"]
    assert r["lo"] > 0
    assert r["p_value"] < 0.01
    # no real difference: large p, CI around 0
    c = (rng.random(400) < 0.5).astype(float)
    d = (rng.random(400) < 0.5).astype(float)
    r0 = paired_bootstrap(c, d, n_resamples=2000, seed=0)
    assert r0["lo"] < 0 < r0["hi"]
    assert r0["p_value"] > 0.05


def test_bootstrap_covers_true_mean_bernoulli():
    x = (np.random.default_rng(4).random(5000) < 0.3).astype(float)
    r = bootstrap_mean_ci(x, n_resamples=2000, seed=0)
    assert r["lo"] <= 0.3 <= r["hi"]
    assert r["lo"] < r["mean"] < r["hi"]
    assert r["hi"] - r["lo"] == pytest.approx(2 * 1.96 * math.sqrt(0.3 * 0.7 / 5000), rel=0.15)


def test_bootstrap_seeds():
    x = np.random.default_rng(5).random(100)
    r1 = bootstrap_mean_ci(x, n_resamples=1000, seed=7)
    r2 = bootstrap_mean_ci(x, n_resamples=1000, seed=7)
    r3 = bootstrap_mean_ci(x, n_resamples=1000, seed=8)
    assert r1 == r2
    assert (r1["lo"], r1["hi"]) != (r3["lo"], r3["hi"])
    assert r1["mean"] == r3["mean"]
    y = np.random.default_rng(6).random(100)
    assert paired_bootstrap(x, y, n_resamples=500, seed=1) == paired_bootstrap(x, y, n_resamples=500, seed=1)


def test_bootstrap_default_resamples_and_chunking(monkeypatch):
    x = (np.random.default_rng(7).random(50) < 0.5).astype(float)
    r = bootstrap_mean_ci(x)  # default n_resamples=10_000
    assert r["lo"] < r["mean"] < r["hi"]
    # many small chunks (the memory bound for large n) still fill every resample
    import eval.stats as stats

    monkeypatch.setattr(stats, "_MAX_CHUNK_ELEMENTS", 64)
    small = bootstrap_mean_ci(x, n_resamples=999)
    assert small["lo"] < small["mean"] < small["hi"]


def test_bootstrap_constant_and_ci_width():
    assert bootstrap_mean_ci([0.1] * 7, n_resamples=50) == {"mean": 0.1, "lo": 0.1, "hi": 0.1}
    x = np.random.default_rng(8).random(200)
    wide = bootstrap_mean_ci(x, n_resamples=1000, ci=0.99)
    narrow = bootstrap_mean_ci(x, n_resamples=1000, ci=0.5)
    assert wide["lo"] < narrow["lo"] < narrow["hi"] < wide["hi"]


# ---------------------------------------------------------------------------------------------- Holm


def test_holm_hand_example():
    r = holm({"a": 0.01, "b": 0.04, "c": 0.03}, alpha=0.05)
    assert list(r) == ["a", "b", "c"]
    assert r["a"]["p_adjusted"] == pytest.approx(0.03)
    assert r["c"]["p_adjusted"] == pytest.approx(0.06)
    assert r["b"]["p_adjusted"] == pytest.approx(0.06)  # max(0.06, 0.04 * 1): monotone
    assert [r[k]["reject"] for k in "abc"] == [True, False, False]
    assert r["b"]["p_value"] == 0.04


def test_holm_cap_and_edge_cases():
    r = holm({"x": 0.6, "y": 0.5})
    assert r["x"]["p_adjusted"] == 1.0 and r["y"]["p_adjusted"] == 1.0
    assert holm({}) == {}
    assert holm({"only": 0.04})["only"] == {"p_value": 0.04, "p_adjusted": 0.04, "reject": True}
    with pytest.raises(ValueError, match="pvalues"):
        holm({"bad": 1.5})
    with pytest.raises(ValueError, match="alpha"):
        holm({"a": 0.1}, alpha=0.0)


# ---------------------------------------------------------------------------------------------- Pareto


def test_pareto_frontier_hand_made():
    pts = [
        (1.0, 0.60),  # 0 frontier
        (0.5, 0.50),  # 1 frontier
        (1.0, 0.55),  # 2 dominated by 0 (same calls, lower accuracy)
        (2.0, 0.60),  # 3 dominated by 0 (more calls, same accuracy)
        (0.5, 0.50),  # 4 duplicate of 1: dropped
        (3.0, 0.70),  # 5 frontier
        (2.5, 0.40),  # 6 dominated
        (0.0, 0.30),  # 7 frontier
    ]
    assert pareto_frontier(pts) == [7, 1, 0, 5]
    assert pareto_frontier([]) == []
    assert pareto_frontier([(1.0, 0.5)]) == [0]


# ---------------------------------------------------------------------------------------------- budgets


def test_accuracy_at_budget_interpolation():
    curve = [(0.0, 0.40), (1.0, 0.60), (2.0, 0.70), (1.5, 0.50)]  # last point is dominated
    assert accuracy_at_budget(curve, 0.5) == pytest.approx(0.50)
    assert accuracy_at_budget(curve, 1.0) == pytest.approx(0.60)
    assert accuracy_at_budget(curve, 1.5) == pytest.approx(0.65)
    assert accuracy_at_budget(curve, 10.0) == pytest.approx(0.70)  # flat beyond the last point
    assert accuracy_at_budget(curve, 0.5, interpolation="step") == pytest.approx(0.40)


def test_accuracy_at_budget_hull_bridges_dip():
    # the middle point lies below the chord: mixing the end points beats it
    curve = [(0.0, 0.50), (1.0, 0.52), (2.0, 0.90)]
    assert accuracy_at_budget(curve, 1.0) == pytest.approx(0.70)
    assert accuracy_at_budget(curve, 1.0, interpolation="frontier") == pytest.approx(0.52)
    assert accuracy_at_budget(curve, 1.0, interpolation="step") == pytest.approx(0.52)


def test_accuracy_at_budget_below_every_point():
    curve = [(0.5, 0.4), (1.0, 0.6)]
    assert accuracy_at_budget(curve, 0.25) is None
    assert accuracy_at_budget(curve, 0.5) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="curve is empty"):
        accuracy_at_budget([], 1.0)
    with pytest.raises(ValueError, match="interpolation"):
        accuracy_at_budget(curve, 1.0, interpolation="spline")


def test_dominance_everywhere():
    a = [(0.2, 0.50), (1.0, 0.70), (1.5, 0.75)]
    b = [(0.2, 0.45), (1.0, 0.60), (1.5, 0.70)]
    r = dominance(a, b, name_a="learned", name_b="always")
    assert len(r["budgets"]) == 50
    assert r["budgets"][0] == pytest.approx(0.2) and r["budgets"][-1] == pytest.approx(1.5)
    assert r["b_better_intervals"] == []
    assert r["a_better_intervals"] == [(pytest.approx(0.2), pytest.approx(1.5))]
    assert r["summary"] == "learned dominates always at every budget in [0.20, 1.50] calls/question"
    assert all(x >= y for x, y in zip(r["acc_a"], r["acc_b"]))
    rev = dominance(b, a)
    assert rev["summary"].startswith("B dominates A")


def test_dominance_crossing():
    a = [(0.0, 0.60), (2.0, 0.70)]  # good when cheap, flat
    b = [(0.0, 0.40), (2.0, 0.90)]  # poor when cheap, steep; equal at budget 1.0
    r = dominance(a, b, budgets=np.linspace(0.0, 2.0, 21))
    assert r["a_better_intervals"] == [(0.0, pytest.approx(0.9))]
    assert r["b_better_intervals"] == [(pytest.approx(1.1), 2.0)]
    assert r["summary"] == "A and B cross: A better in [0.00, 0.90], B better in [1.10, 2.00]"


def test_dominance_equal_and_undefined_budgets():
    c = [(0.0, 0.5), (1.0, 0.6)]
    assert "equal at every budget" in dominance(c, list(c))["summary"]
    r = dominance([(1.0, 0.5)], [(0.0, 0.4)], budgets=[0.5, 1.0, 2.0])
    assert r["acc_a"][0] is None
    assert r["a_better_intervals"] == [(1.0, 2.0)]
    with pytest.raises(ValueError, match="curve_b is empty"):
        dominance(c, [])


# ---------------------------------------------------------------------------------------------- compare


def _synthetic(n: int = 300):
    rng = np.random.default_rng(11)
    ref = (rng.random(n) < 0.5).astype(float)
    return {
        "ref": ref,
        "much_better": np.where(rng.random(n) < 0.4, 1.0, ref),
        "slightly_better": np.where(rng.random(n) < 0.05, 1.0, ref),
        "same": ref.copy(),
    }


def test_compare_methods_rows():
    pq = _synthetic()
    rows = compare_methods(pq, "ref", n_resamples=1000, seed=0)
    keys = {"method", "reference", "diff", "lo", "hi", "p_bootstrap", "b", "c", "p_mcnemar", "p_holm", "reject"}
    assert [r["method"] for r in rows] == ["much_better", "slightly_better", "same"]
    assert all(set(r) == keys and r["reference"] == "ref" for r in rows)
    by = {r["method"]: r for r in rows}
    assert by["much_better"]["reject"] and by["much_better"]["c"] == 0
    assert by["same"]["p_mcnemar"] == 1.0 and by["same"]["p_holm"] == 1.0 and not by["same"]["reject"]
    # Holm: adjusted >= raw, capped at 1, monotone in the raw order
    for r in rows:
        assert r["p_mcnemar"] <= r["p_holm"] <= 1.0
    ordered = sorted(rows, key=lambda r: r["p_mcnemar"])
    assert all(x["p_holm"] <= y["p_holm"] for x, y in zip(ordered, ordered[1:]))
    # explicit correctness is used for McNemar instead of the 0.5 threshold
    correct = {k: np.zeros(len(v), dtype=bool) for k, v in pq.items()}
    rows2 = compare_methods(pq, "ref", correct=correct, n_resamples=200)
    assert all(r["b"] == 0 and r["c"] == 0 and r["p_mcnemar"] == 1.0 for r in rows2)


def test_compare_methods_only_reference():
    assert compare_methods({"ref": np.ones(5)}, "ref", n_resamples=100) == []


# ---------------------------------------------------------------------------------------------- validation


def test_invalid_inputs_name_the_argument():
    with pytest.raises(ValueError, match=r"a and b must have the same length.*3 and 2"):
        paired_bootstrap([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="x is empty"):
        bootstrap_mean_ci([])
    with pytest.raises(ValueError, match="b is empty"):
        paired_bootstrap([1.0], [])
    with pytest.raises(ValueError, match="x contains NaN"):
        bootstrap_mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_mean_ci([1.0, 2.0], n_resamples=0)
    with pytest.raises(ValueError, match="ci must be"):
        paired_bootstrap([1.0, 2.0], [1.0, 1.0], ci=1.5)
    with pytest.raises(ValueError, match="a_correct and b_correct must have the same length"):
        mcnemar_exact([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="a_correct is empty"):
        mcnemar_exact(np.array([], dtype=bool), np.array([], dtype=bool))
    with pytest.raises(ValueError, match="reference 'nope'"):
        compare_methods({"ref": np.ones(3)}, "nope")
    with pytest.raises(ValueError, match=r"per_question\['m'\] and per_question\['ref'\]"):
        compare_methods({"ref": np.ones(3), "m": np.ones(4)}, "ref", n_resamples=10)
    with pytest.raises(ValueError, match=r"per_question\['m'\] is empty"):
        compare_methods({"ref": np.ones(3), "m": []}, "ref", n_resamples=10)
    with pytest.raises(ValueError, match="correct has no entry"):
        compare_methods({"ref": np.ones(3), "m": np.ones(3)}, "ref", correct={"ref": np.ones(3)})
    with pytest.raises(ValueError, match="points must be a list"):
        pareto_frontier([(1.0, 2.0, 3.0)])
