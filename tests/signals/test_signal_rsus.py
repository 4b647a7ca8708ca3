"""RSUS and its components: U_verb, U_ent (BM25 entropy), U_cons (agreement), weights."""

import math

import numpy as np
import pytest

from agents.reasoners.base import Step
from agents.signals import (
    RSUS,
    BM25Scores,
    RSUSConfig,
    VerbalConfidence,
    agreement,
    extract_entities,
    fit_weights,
    has_discourse_marker,
    surface_features,
    u_cons,
    u_ent,
)
from agents.signals.base import SignalUnavailable
from agents.signals.rsus import parse_confidence, score_entropy
from envs.core.config import ConfigError

CORPUS = ["Mira 's father is Tovan .", "Tovan was born in Kasford .", "Kelcorp is headquartered in Kasford .",
          "Bren works for Kelcorp ."]


def _step(content, index=1, **meta):
    return Step(index, f"Step {index} : {content}", content, False, meta=meta)


def test_entities_hedges_markers():
    assert extract_entities("Step 2 : The father of Mira is Tovan , so Tovan lives in New Kasford .") == \
        ["Mira", "Tovan", "New Kasford"]
    assert surface_features("Maybe Mira probably works for Kelcorp , therefore 3 .").tolist() == \
        [2.0, 2.0, 8.0, 1.0, 1.0]
    assert has_discourse_marker("A is B , which means C") and not has_discourse_marker("Sofa is soft .")


def test_verbal_confidence():
    assert parse_confidence("I'd say about 85%.") == 85.0 and parse_confidence("none") is None
    assert parse_confidence("250") is None
    seen = {}

    def ask(step, state, prompt):
        seen["prompt"] = prompt
        return "Confidence: 80"

    assert VerbalConfidence(ask)(_step("x")) == pytest.approx(0.2)
    assert "0-100" in seen["prompt"]
    with pytest.raises(SignalUnavailable):
        VerbalConfidence(lambda *a: "no idea")(_step("x"))


def test_score_entropy_bounds():
    assert score_entropy(np.ones(100), 100) == pytest.approx(1.0)   # spread evenly: maximal uncertainty
    assert score_entropy(np.r_[5.0, np.zeros(99)], 100) == 0.0      # one hit: certain
    assert score_entropy(np.zeros(10), 10) == 1.0                   # no positive hit: unknown
    assert score_entropy([1.0, 1.0], 4) == pytest.approx(math.log(2) / math.log(4))


def test_bm25_scores_and_u_ent():
    src = BM25Scores(CORPUS)
    s = src.scores("Kasford", 100)
    assert len(s) == len(CORPUS) and (np.diff(s) <= 0).all()     # clipped to corpus size, descending
    assert (s > 0).sum() == 2 and s[0] == pytest.approx(s[1])
    assert src.scores("the", 3).tolist() == [0.0, 0.0, 0.0]     # stop words only: no tokens
    # Mira: one hit (0); Tovan: two equal hits (log 2 / log 4 = 0.5) -> mean 0.25
    assert u_ent("Mira 's father is Tovan .", src, k=100) == pytest.approx(0.25)
    assert u_ent("Zorblat 's father is Qux .", src) == pytest.approx(1.0)      # unknown entities


def test_agreement_and_u_cons():
    a, b = "Step 2 : A 's mother is B .", "A 's mother is C ."
    assert agreement(a, a.replace("Step 2 : ", "")) == 1.0
    assert agreement(a, b) == pytest.approx(4 / 6)  # {a, s, mother, is} shared of 6 tokens
    assert agreement(a, b, "exact") == 0.0
    assert u_cons([a, a, a]) == 0.0
    assert u_cons([a, a, b]) == pytest.approx(1 - (1 + 2 * 4 / 6) / 3)
    assert u_cons([a, a, b], "exact") == pytest.approx(1 - 1 / 3)
    with pytest.raises(SignalUnavailable):
        u_cons([a])
    with pytest.raises(ValueError, match="agreement"):
        agreement(a, b, "cosine")


class FakeReasoner:
    def __init__(self):
        self.calls = []

    def sample_alternatives(self, state, k, seed):
        self.calls.append((state, k, seed))
        return ["A is B ."] * (k - 1) + ["A is C ."]


def test_rsus_weights_components_and_renormalisation():
    src = BM25Scores(CORPUS)
    r = FakeReasoner()
    rsus = RSUS(u_verb=lambda step, state: 0.2, scorer=src, reasoner=r)
    v = rsus(_step("Mira 's father is Tovan .", index=2), state="S")
    ucons = 1 - (1 + 2 * 0.5) / 3  # jaccard({a,is,b},{a,is,c}) = 2/4
    assert r.calls == [("S", 3, 2)]  # k = 3 samples, seed + step index
    np.testing.assert_allclose(v, [0.40 * 0.2 + 0.35 * 0.25 + 0.25 * ucons, 0.2, 0.25, ucons, 1, 1, 1], rtol=1e-6)
    # without a state there are no samples: U_cons is dropped and the weights renormalised
    v = rsus(_step("Mira 's father is Tovan ."))
    np.testing.assert_allclose(v, [(0.40 * 0.2 + 0.35 * 0.25) / 0.75, 0.2, 0.25, 0.0, 1, 1, 0], rtol=1e-6)
    assert rsus.requires == ("sampling",)
    assert RSUS(config=RSUSConfig(w_cons=0.0)).requires == ()
    with pytest.raises(SignalUnavailable):
        RSUS()(_step("x"))


def test_rsus_cons_only_at_markers_and_meta_inputs():
    cfg = RSUSConfig(w_verb=0.5, w_ent=0.0, w_cons=0.5, cons_only_at_markers=True)
    rsus = RSUS(config=cfg)
    alts = ["A is B .", "A is C .", "A is D ."]
    plain = rsus(_step("A is B .", verbal_confidence=90, alternatives=alts))
    np.testing.assert_allclose(plain, [0.1, 0.1, 0.0, 0.0, 1, 0, 0], atol=1e-6)  # no marker: U_cons skipped
    marked = rsus(_step("so A is B .", verbal_confidence=90, alternatives=alts))
    assert marked[3] == pytest.approx(0.5) and marked[0] == pytest.approx(0.5 * 0.1 + 0.5 * 0.5)
    with pytest.raises(ConfigError, match="weights"):
        RSUSConfig.from_dict({"w_verb": -1})


def test_fit_weights_recovers_the_informative_component():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(300, 3))
    y = X[:, 1] + 0.01 * rng.normal(size=300)
    w = fit_weights(X, y)
    assert w[1] == pytest.approx(1.0) and sum(w) == pytest.approx(1.0)


def test_rsus_score_is_the_signals_weighted_mean_over_available_components():
    """The vectorised RSUS (the detection benchmark's) equals the signal's on the same components."""
    from agents.signals.rsus import PAPER_WEIGHTS, rsus_score

    for verb, cons in ((0.3, None), (None, 0.8), (0.1, 0.9)):
        rsus = RSUS(corpus=["Mira 's father is Tovan .", "Tovan was born in Kasford ."],
                    u_verb=(lambda s, st, v=verb: v) if verb is not None else None,
                    alternatives=(lambda s, st, c=cons: ["a b", "a c"] if c is not None else None))
        step = Step(1, "", "Mira 's father is Tovan .", False)
        got = rsus(step)
        comps = [got[1] if got[4] else np.nan, got[2] if got[5] else np.nan, got[3] if got[6] else np.nan]
        np.testing.assert_allclose(rsus_score(np.array([comps]), PAPER_WEIGHTS)[0], got[0], atol=1e-6)
    assert np.isnan(rsus_score(np.array([[np.nan, np.nan, np.nan]]), PAPER_WEIGHTS)[0])
    assert rsus_score(np.array([[0.9, 0.2, np.nan]]), (0.0, 1.0, 1.0))[0] == pytest.approx(0.2)  # weight 0: left out
