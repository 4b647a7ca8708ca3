"""numpy detection metrics against known values, and the splitters."""

import math

import numpy as np
import pytest

from policies.probes import (
    auroc,
    average_precision,
    binary_stats,
    bootstrap_auroc_ci,
    entity_disjoint_split,
    evaluate_detector,
    group_split,
    youden_threshold,
)

Y = [0, 0, 1, 1]
S = [0.1, 0.4, 0.35, 0.8]  # scikit-learn's documented example: AUROC 0.75, AP 0.8333


def test_auroc_known_values():
    assert auroc([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert auroc([0, 0, 1, 1], [0.9, 0.8, 0.2, 0.1]) == 0.0
    assert auroc(Y, S) == 0.75
    # ties count 1/2: pairs (0.2|0.2)=.5, (0.2|0.1)=1, (0.3|0.2)=1, (0.3|0.1)=1 -> 3.5 / 4
    assert auroc([0, 1, 0, 1], [0.2, 0.2, 0.1, 0.3]) == 0.875
    assert auroc([0, 1], [0.5, 0.5]) == 0.5
    assert math.isnan(auroc([1, 1], [0.1, 0.2]))
    with pytest.raises(ValueError, match="NaN"):
        auroc([0, 1], [0.1, float("nan")])


def test_average_precision_known_values():
    assert average_precision(Y, S) == pytest.approx(0.8333333)
    assert average_precision([1, 0, 1], [0.9, 0.8, 0.7]) == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    assert average_precision([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert average_precision([1, 0], [0.5, 0.5]) == 0.5  # one threshold: P = 1/2 at R = 1


def test_binary_stats_and_youden():
    assert binary_stats([1, 1, 0, 0], [1, 0, 1, 0]) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert binary_stats([1, 0], [0, 0]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    # J: t=0.8 -> .5, t=0.4 -> 0, t=0.35 -> .5, t=0.1 -> 0; ties go to the higher threshold
    assert youden_threshold(Y, S) == 0.8
    assert youden_threshold([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 0.8
    assert math.isnan(youden_threshold([0, 0], [0.1, 0.2]))


def test_bootstrap_is_grouped_and_seeded():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = y + rng.normal(scale=1.0, size=300)
    g = np.repeat(np.arange(100), 3)
    lo, hi = bootstrap_auroc_ci(y, s, g, n_boot=200, seed=3)
    assert (lo, hi) == bootstrap_auroc_ci(y, s, g, n_boot=200, seed=3)
    assert lo < auroc(y, s) < hi and hi - lo < 0.2
    assert bootstrap_auroc_ci([0, 1, 0, 1], [0, 1, 0, 1], ["a", "a", "b", "b"], n_boot=50) == (1.0, 1.0)


def test_evaluate_detector_orientation_and_threshold():
    m = evaluate_detector(Y, S, groups=["q1", "q1", "q2", "q2"], threshold=0.35, n_boot=20)
    assert m["auroc"] == 0.75 and m["threshold"] == 0.35
    assert (m["precision"], m["recall"], m["fire_rate"]) == (2 / 3, 1.0, 0.75)
    inv = evaluate_detector(Y, [-x for x in S], higher_is_error=False, n_boot=0)
    assert inv["auroc"] == 0.75 and inv["threshold"] == -0.8  # Youden on the oriented scores
    assert inv["recall"] == 0.5 and inv["precision"] == 1.0


def test_group_split():
    groups = [f"q{i // 3}" for i in range(300)]
    tr, va = group_split(groups, 0.3, seed=1)
    g = np.array(groups)
    assert not set(g[tr]) & set(g[va]) and len(tr) + len(va) == 300
    assert len(set(g[va])) == 30
    assert np.array_equal(va, group_split(groups, 0.3, seed=1)[1])
    assert not np.array_equal(va, group_split(groups, 0.3, seed=2)[1])
    with pytest.raises(ValueError, match="2 groups"):
        group_split(["a", "a"])


def test_entity_disjoint_split():
    rng = np.random.default_rng(0)
    subjects = rng.choice([f"E{i}" for i in range(40)], 500).tolist()
    subjects[:5] = [None] * 5
    tr, te = entity_disjoint_split(subjects, 0.3, seed=0)
    s = np.array(["" if x is None else x for x in subjects])
    assert not set(s[tr]) & set(s[te])
    assert 0.3 <= len(te) / 500 < 0.4 and len(tr) + len(te) == 500


def test_group_kfold_keeps_groups_whole_and_balances_folds():
    import numpy as np
    import pytest

    from policies.probes.splits import group_kfold

    groups = np.repeat([f"q{i}" for i in range(11)], [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2])
    fold = group_kfold(groups, 5, seed=0)
    for g in np.unique(groups):
        assert np.unique(fold[groups == g]).size == 1                       # a question sits in one fold
    per_fold = [np.unique(groups[fold == f]).size for f in range(5)]
    assert sorted(per_fold) == [2, 2, 2, 2, 3]                             # 11 questions over 5 folds
    assert np.array_equal(fold, group_kfold(groups, 5, seed=0))
    assert np.array_equal(fold[::-1], group_kfold(groups[::-1], 5, seed=0))  # order-independent
    with pytest.raises(ValueError, match="cannot make 12 folds"):
        group_kfold(groups, 12)


def test_read_done_rows_names_the_line_of_a_row_without_a_required_field(tmp_path):
    import json

    import pytest

    from envs.core.io import read_done_rows

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"question_index": 0, "steps": []}) + "\n" + json.dumps({"question_index": 1}) + "\n")
    lines: dict[int, int] = {}
    assert set(read_done_rows(path, line_of=lines)) == {0, 1} and lines == {0: 1, 1: 2}
    with pytest.raises(ValueError, match=r"rows.jsonl:2: row without 'steps'"):
        read_done_rows(path, require=("steps",))
    path.write_text(json.dumps({"steps": []}) + "\n" + json.dumps({"question_index": 1}) + "\n")
    with pytest.raises(ValueError, match=r"rows.jsonl:1: row without 'question_index'"):
        read_done_rows(path)
