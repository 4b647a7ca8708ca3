"""Learned step-boundary segmenter."""

from __future__ import annotations

import random

import pytest

from agents.boundary import (
    BoundarySegmenter,
    SegmenterConfig,
    boundary_scores,
    chain_example,
    sentence_start_baseline,
    tokenize,
    train_segmenter,
)


def test_chain_example_strips_markers_and_labels_step_starts():
    toks, y = chain_example(["**Step 1:** Paris is in France.", "Step 2: It is the capital", "Answer: Paris"])
    assert toks == ["Paris", "is", "in", "France", ".", "It", "is", "the", "capital", "Paris"]
    assert y == [1, 0, 0, 0, 0, 1, 0, 0, 0, 1]
    assert chain_example(["Step 1:", "Step 2: x"]) == (["x"], [1])  # empty steps contribute nothing


def test_boundary_scores_by_hand():
    s = boundary_scores([1, 1, 0, 1, 0], [1, 1, 0, 0, 1])  # first position is not scored
    assert (s["tp"], s["pred"], s["gold"]) == (1.0, 2.0, 2.0)
    assert s["precision"] == s["recall"] == s["f1"] == 0.5
    assert boundary_scores([1, 0], [1, 0])["f1"] == 0.0
    assert sentence_start_baseline(tokenize("A b. C d? E")) == [1, 0, 0, 1, 0, 0, 1]


def test_windows_cover_every_token():
    seg = BoundarySegmenter(None, SegmenterConfig(window=8, stride=4))
    for n in (1, 5, 8, 9, 13, 30):
        covered = set()
        for a, b in seg.windows(n):
            assert b - a <= 8
            covered |= set(range(a, b))
        assert covered == set(range(n))


def _synthetic(n: int, seed: int):
    """Chains whose steps start with 'So' or 'Then' and have no sentence punctuation: boundaries must be
    learned from the words."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "red", "blue", "x1", "y2"]
    chains = []
    for _ in range(n):
        lines = []
        for i in range(rng.randint(2, 6)):
            head = rng.choice(["So", "Then"]) if i else "First"
            lines.append(f"Step {i + 1}: {head} " + " ".join(rng.choice(words) for _ in range(rng.randint(2, 7))))
        chains.append(chain_example(lines))
    return chains


def test_segmenter_learns_and_reloads(tmp_path):
    cfg = SegmenterConfig(n_buckets=256, d_model=32, n_layers=1, n_heads=2, ff_dim=64, window=32, stride=16)
    seg = train_segmenter(_synthetic(200, 0), cfg, epochs=6, lr=3e-3, seed=0)
    test = _synthetic(40, 1)
    tot = {"tp": 0.0, "pred": 0.0, "gold": 0.0}
    for toks, y in test:
        pred = [1] + [int(p >= 0.5) for p in seg.token_probs(toks)[1:]]
        s = boundary_scores(pred, y)
        for k in tot:
            tot[k] += s[k]
    f1 = 2 * tot["tp"] / (tot["pred"] + tot["gold"])
    assert f1 > 0.9, f1
    # the sentence-end rule cannot find these boundaries (there is no punctuation)
    assert sum(boundary_scores(sentence_start_baseline(t), y)["tp"] for t, y in test) == 0
    seg.save(tmp_path / "seg", note="test")
    again = BoundarySegmenter.load(tmp_path / "seg")
    toks = test[0][0]
    assert (again.token_probs(toks) == seg.token_probs(toks)).all()
    parts = again.segment("First alpha beta Then gamma delta So red")
    assert parts[0].startswith("First") and len(parts) >= 2
    with pytest.raises(FileNotFoundError, match="not a boundary segmenter"):
        BoundarySegmenter.load(tmp_path)
    with pytest.raises(ValueError, match="no training chains"):
        train_segmenter([])

