"""RSUS weight refitting: reproducible on a fixed dataset, saved and loaded by name, used by the env."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.signals.rsus import fit_weights, load_rsus_weights, rsus_correlation, save_rsus_weights


def _data(seed=0, n=400):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    A = (rng.random((n, 3)) > 0.2).astype(float)
    A[:, 0] = 0  # U_verb never available (as on the micro-world LM)
    y = 0.2 * X[:, 1] + 0.8 * X[:, 2] * A[:, 2] + 0.05 * rng.standard_normal(n)
    return X, A, y


def test_refit_is_reproducible_and_beats_the_paper_weights():
    X, A, y = _data()
    w1 = fit_weights(X, y, step=0.05, available=A, use=("ent", "cons"))
    w2 = fit_weights(X, y, step=0.05, available=A, use=("ent", "cons"))
    assert w1 == w2 and w1[0] == 0.0 and w1[2] > w1[1]
    assert rsus_correlation(X, y, w1, A) > rsus_correlation(X, y, (0.0, 0.35, 0.25), A)


def test_saved_by_name_and_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIROS_RSUS_WEIGHTS", str(tmp_path))
    path = save_rsus_weights("dev1", (0.0, 0.3, 0.7), {"correlation": 0.5})
    assert json.loads(path.read_text())["weights"] == {"verb": 0.0, "ent": 0.3, "cons": 0.7}
    assert load_rsus_weights("dev1") == (0.0, 0.3, 0.7) and load_rsus_weights(str(path)) == (0.0, 0.3, 0.7)
    assert load_rsus_weights("paper") == (0.40, 0.35, 0.25)
    with pytest.raises(FileNotFoundError, match="RSUS weight set 'nope': no file .*kairos train rsus-weights"):
        load_rsus_weights("nope")
    with pytest.raises(ValueError, match="not 'paper'"):
        save_rsus_weights("paper", (1, 1, 1))


def test_the_env_uses_a_named_weight_set(tmp_path, monkeypatch):
    from envs.components import build_components
    from envs.core.config import ConfigError
    from envs.env_config import EnvConfig

    monkeypatch.setenv("KAIROS_RSUS_WEIGHTS", str(tmp_path))
    save_rsus_weights("only_cons", (0.0, 0.0, 1.0))
    base = {"split": "dev", "max_questions": 2, "rsus_components": ["ent", "cons"]}
    c = build_components(EnvConfig.from_dict({**base, "rsus_options": {"weights": "only_cons"}}))
    rsus = next(s for s in c.extractor.signals if s.name == "rsus")
    assert (rsus.config.w_verb, rsus.config.w_ent, rsus.config.w_cons) == (0.0, 0.0, 1.0)
    default = build_components(EnvConfig.from_dict(base))
    assert c.namespace != default.namespace  # the weights' values enter the cache namespace
    with pytest.raises(ConfigError, match="rsus_options.weights: RSUS weight set 'missing': no file"):
        EnvConfig.from_dict({**base, "rsus_options": {"weights": "missing"}})
    with pytest.raises(ValueError, match="gives weight 0 to every configured component"):
        build_components(EnvConfig.from_dict({**base, "rsus_components": ["ent"],
                                               "rsus_options": {"weights": "only_cons"}}))


def test_fit_rsus_end_to_end_on_a_tiny_slice(tmp_path):
    from train.rsus_fit import RSUSFitConfig, fit_rsus

    cfg = RSUSFitConfig.from_dict({"name": "tiny", "questions": "0:12", "folder": str(tmp_path),
                                   "labels_dir": str(tmp_path / "labels"),
                                   "env": {"split": "dev", "rsus_components": ["ent", "cons"],
                                           "signals": ["output", "rsus"], "cache_path": str(tmp_path / "c.sqlite")}})
    out = fit_rsus(cfg, progress=False)
    assert out["weights"]["verb"] == 0.0 and abs(sum(out["weights"].values()) - 1) < 1e-9
    assert out["fitted_on"]["steps"] > 10 and load_rsus_weights(str(tmp_path / "tiny.json")) == tuple(
        out["weights"][k] for k in ("verb", "ent", "cons"))
    again = fit_rsus(cfg, progress=False)  # the same questions again (cache replays): the same weights
    assert again["weights"] == out["weights"]


def test_a_trained_u_verb_proxy_plugs_in_through_the_env_config(tmp_path):
    """U_verb for a reasoner that cannot state a confidence: a proxy probe (surface features of the step) named in
    rsus_options.verb_proxy — then u_verb is a real, unmasked scalar."""
    from envs.components import build_components
    from envs.core.config import ConfigError
    from envs.core.microworld.artifact import load_artifact, world_model_id
    from envs.env_config import EnvConfig
    from policies.probes.rsus_proxy import train_rsus_proxy

    texts = ["Mira 's father is Tovan .", "maybe Mira 's father is Kel ?", "Tovan was born in Kasford .",
             "perhaps Kel works for Zarn ."] * 20
    labels = np.array([0, 1, 0, 1] * 20, dtype=np.float32)
    idx = np.arange(len(texts))
    probe, _ = train_rsus_proxy(texts, labels, idx[:60], idx[60:], model_id=world_model_id(load_artifact(None)))
    probe.save(tmp_path / "proxy")
    base = {"split": "dev", "max_questions": 2, "rsus_components": ["verb", "ent"]}
    c = build_components(EnvConfig.from_dict({**base, "rsus_options": {"verb_proxy": str(tmp_path / "proxy")}}))
    import gymnasium as gym

    import envs  # noqa: F401

    env = gym.make("kairos/MicroWorld-v0", config={**base, "rsus_options": {"verb_proxy": str(tmp_path / "proxy")}},
                   components=c)
    _, info = env.reset(seed=0)
    assert "u_verb" in info["signals"] and 0.0 <= info["signals"]["u_verb"] <= 1.0
    _, info0 = gym.make("kairos/MicroWorld-v0", config=base).reset(seed=0)
    assert "u_verb" in info0["masked_signals"]  # without a source U_verb is masked, never a silent 0
    assert "micro-world LM has no chat turn" in info0["masked_reasons"]["u_verb"]  # ... and says why
    assert "masked_reasons" not in info  # the proxy answers for it
    with pytest.raises(ConfigError, match="verb_proxy is set but 'verb' is not in rsus_components"):
        EnvConfig.from_dict({**base, "rsus_components": ["ent"],
                             "rsus_options": {"verb_proxy": str(tmp_path / "proxy")}})
    with pytest.raises(ConfigError, match="verb_proxy: no probe at"):
        EnvConfig.from_dict({**base, "rsus_options": {"verb_proxy": str(tmp_path / "none")}})
    # a job that trains the proxy before anything reads it (kairos quickstart) checks its configs first: the path it
    # will write is accepted inside pending_probes, and only there
    from envs.env_config import pending_probes

    with pending_probes(tmp_path / "none"):
        EnvConfig.from_dict({**base, "rsus_options": {"verb_proxy": str(tmp_path / "none")}})
        with pytest.raises(ConfigError, match="verb_proxy: no probe at"):
            EnvConfig.from_dict({**base, "rsus_options": {"verb_proxy": str(tmp_path / "other")}})
    with pytest.raises(ConfigError, match="verb_proxy: no probe at"):
        EnvConfig.from_dict({**base, "rsus_options": {"verb_proxy": str(tmp_path / "none")}})
