"""Probe training, save / load with metadata checks, ReProbe and the RSUS proxy on synthetic data."""

import json

import numpy as np
import pytest

from agents.reasoners.base import Step
from agents.signals import RSUS, RSUSConfig, pulse_features
from policies.probes import FeatureSpec, FitConfig, Probe, ProbeMismatchError, fit_probe, group_split
from policies.probes.probe import default_arch
from policies.probes.rsus_proxy import train_rsus_proxy

FAST = FitConfig(max_epochs=40, patience=10)


def _pulse_data(n=400, seed=0):
    """States [n, 4, 3] whose layer-1 -> 2 magnitude is larger for errors."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    h = rng.normal(size=(n, 4, 3))
    h[:, 2] = h[:, 1] + rng.normal(size=(n, 3)) * (0.3 + 1.5 * y[:, None])
    return h.astype(np.float32), y


@pytest.fixture(scope="module")
def pulse_probe():
    h, y = _pulse_data()
    spec = FeatureSpec("pulse", layers=(0, 3))
    X = spec.compute(hidden_mean=h)
    groups = np.arange(len(y)) // 2
    tr, va = group_split(groups, 0.3, seed=0)
    probe, hist = fit_probe(spec, X, y, tr, va, model_id="microworld:tiny@abc", fit=FAST)
    return probe, hist, h, X


def test_pulse_probe_learns_and_scores_live_steps(pulse_probe):
    probe, hist, h, X = pulse_probe
    assert hist["best_val_auroc"] > 0.85
    assert probe.arch == {"type": "mlp", "in_dim": 6, "hidden": [128, 64], "dropout": 0.0}
    step = Step(1, "", "", False, hidden_mean=h[0])
    assert probe.score_step(step) == pytest.approx(probe.predict_proba(X[:1])[0], rel=1e-6)
    np.testing.assert_allclose(X[0], pulse_features(h[0], (0, 3)))
    assert set(np.unique(probe.predict(X))) <= {0, 1}
    with pytest.raises(ValueError, match=r"expects \[N, 6\]"):
        probe.predict_proba(X[:, :3])


def test_save_load_roundtrip_and_mismatch_errors(pulse_probe, tmp_path):
    probe, _, _, X = pulse_probe
    probe.save(tmp_path / "p")
    meta = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert meta["model_id"] == "microworld:tiny@abc" and meta["spec"]["layers"] == [0, 3]
    assert meta["spec"]["pooling"] == "mean" and len(meta["normalization"]["mean"]) == 6
    assert meta["format_version"] == 1 and meta["threshold"] == 0.5
    back = Probe.load(tmp_path / "p", expected_model_id="microworld:tiny@abc",
                      expected_spec=FeatureSpec("pulse", layers=(0, 3)))
    np.testing.assert_allclose(back.predict_proba(X), probe.predict_proba(X), rtol=1e-6)
    with pytest.raises(ProbeMismatchError, match="'microworld:tiny@abc'.*'Qwen/Qwen2.5-7B'"):
        Probe.load(tmp_path / "p", expected_model_id="Qwen/Qwen2.5-7B")
    with pytest.raises(ProbeMismatchError, match=r"layer interval \[0, 3\].*layer interval \[7, 25\]"):
        Probe.load(tmp_path / "p", expected_spec={"layers": (7, 25)})
    with pytest.raises(ProbeMismatchError, match="pooling mean.*pooling last"):
        Probe.load(tmp_path / "p", expected_spec=FeatureSpec("pulse", layers=(0, 3), pooling="last"))
    with pytest.raises(FileNotFoundError, match="kairos probe train"):
        Probe.load(tmp_path / "missing")
    meta["format_version"] = 99
    (tmp_path / "p" / "probe.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="format version 99"):
        Probe.load(tmp_path / "p")


def test_reprobe_trains_on_all_layer_states(tmp_path):
    rng = np.random.default_rng(1)
    n = 300
    y = rng.integers(0, 2, n)
    h = rng.normal(size=(n, 3, 8)).astype(np.float32)
    h[:, 1] += 1.5 * y[:, None]  # the signal lives in one layer
    spec = FeatureSpec("reprobe", pooling="last")
    X = spec.compute(hidden_last=h)
    arch = default_arch(spec, X.shape[1], (3, 8))
    tr, va = np.arange(210), np.arange(210, 300)
    probe, hist = fit_probe(spec, X, y, tr, va, model_id="m", arch=arch, fit=FitConfig(max_epochs=25, patience=8))
    assert hist["best_val_auroc"] > 0.8
    probe.save(tmp_path / "r")
    back = Probe.load(tmp_path / "r", expected_model_id="m")
    step = Step(1, "", "", False, hidden_last=h[5])
    assert back.score_step(step) == pytest.approx(probe.predict_proba(X[5:6])[0], rel=1e-5)


def test_rsus_proxy_is_a_u_verb_callable(tmp_path):
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 200)
    texts = [("maybe perhaps " if e else "") + f"Mira {i} works for Kelcorp ." for i, e in enumerate(y)]
    probe, hist = train_rsus_proxy(texts, y, np.arange(140), np.arange(140, 200), model_id="gpt-x", fit=FAST)
    assert hist["best_val_auroc"] > 0.95 and probe.spec.extra == "surface"
    probe.save(tmp_path / "u")
    proxy = Probe.load(tmp_path / "u", expected_model_id="gpt-x")
    rsus = RSUS(u_verb=proxy, config=RSUSConfig(w_ent=0.0, w_cons=0.0))
    hedged = rsus(Step(1, "", "maybe perhaps Mira 7 works for Kelcorp .", False))[0]
    plain = rsus(Step(1, "", "Mira 7 works for Kelcorp .", False))[0]
    assert 0 <= plain < 0.5 < hedged <= 1


def test_rsus_proxy_reads_the_minilm_sentence_embedding_in_training_and_at_run_time(tmp_path):
    """The paper's "SBERT + surface features": the step's all-MiniLM-L6-v2 embedding (384) beside its 5 surface
    features, computed from the text — in training and, for a live step, at run time (nothing in step.meta). The
    labels here depend on what the step says (a company), which no surface feature sees."""
    from agents.signals.text import MiniLMEncoder

    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 120)
    texts = [f"Mira {i} works for {'the bakery' if e else 'the shipyard'} ." for i, e in enumerate(y)]
    probe, hist = train_rsus_proxy(texts, y, np.arange(80), np.arange(80, 120), model_id="gpt-x", fit=FAST,
                                   features="surface+minilm")
    assert probe.spec.extra == "surface+minilm" and probe.mean.size == 5 + 384 and hist["best_val_auroc"] > 0.95
    surface, _ = train_rsus_proxy(texts, y, np.arange(80), np.arange(80, 120), model_id="gpt-x", fit=FAST)
    assert surface.mean.size == 5
    probe.save(tmp_path / "p")
    back = Probe.load(tmp_path / "p", expected_model_id="gpt-x", expected_spec={"signal": "rsus_proxy"})
    live = back(Step(1, "Step 1: " + texts[100], texts[100], False))
    assert live == pytest.approx(probe.predict_proba(probe.spec.compute(texts=[texts[100]]))[0], rel=1e-5)
    fresh = MiniLMEncoder()  # nothing memoised: batching (and its padding) does not change an embedding
    np.testing.assert_allclose(fresh(texts[:3], batch=2), probe.spec.compute(texts=texts[:3])[:, 5:], atol=1e-5)
    with pytest.raises(ValueError, match="unknown RSUS proxy features 'sbert'"):
        train_rsus_proxy(texts, y, np.arange(80), np.arange(80, 120), model_id="gpt-x", features="sbert")


def test_fit_handles_a_single_class_validation_set():
    X = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    y = np.r_[np.zeros(20), np.ones(10), np.ones(10)]
    probe, hist = fit_probe(FeatureSpec("pulse", layers=(0, 1)), X, y, np.arange(30), np.arange(30, 40),
                            model_id="m", fit=FitConfig(max_epochs=5))
    assert np.isnan(hist["best_val_auroc"]) and hist["epochs"] >= 1
