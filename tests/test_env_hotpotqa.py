"""The HotpotQA preset (SmolLM2-135M + BM25 over the question set's paragraphs) passes the env checker."""


import gymnasium as gym
import pytest
from _needs import needs_hotpotqa, needs_smollm2
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401

pytestmark = pytest.mark.slow


@needs_smollm2
@needs_hotpotqa
@pytest.mark.parametrize("querygen", [False, True])
def test_hotpotqa_preset_check_env(querygen):
    env = gym.make("kairos/RetrievalTiming-v0", preset="hotpotqa",
                   config={"split": "dev[0:8]", "max_steps": 2, "max_step_tokens": 16, "rsus_components": ["ent"],
                           "querygen": querygen})
    check_env(env.unwrapped)
    obs, info = env.reset(seed=0)
    assert obs["mask"][0] == 1.0  # PUlSE is real on a transformers model
    a = (1, 3) if querygen else 1
    obs, r, te, tr, info = env.step(a)
    assert info["query"] and info["costs"]["retrieval_calls"] == 1.0


@needs_smollm2
@needs_hotpotqa
def test_hotpotqa_id_and_dragin_rind_through_the_env():
    """kairos/HotpotQA-v0 is registered; signals: [.., rind] runs DRAGIN's RIND (eager attention captured)."""
    from policies.triggers import ThresholdTrigger

    env = gym.make("kairos/HotpotQA-v0", config={"split": "dev[0:4]", "max_steps": 2, "max_step_tokens": 16,
                                                 "signals": ["output", "rind"]}).unwrapped
    obs, info = env.reset(options={"question_index": 0})
    assert obs["rind"].shape == (1,) and info["signals"]["rind"] >= 0.0
    trig = ThresholdTrigger("rind", -1.0, "above", name="DRAGIN")
    obs, r, te, tr, info = env.step(trig.decide(obs, info))
    assert info["costs"]["retrieval_calls"] == 1.0


@needs_smollm2
@needs_hotpotqa
def test_hotpotqa_env_exposes_a_probe_trained_for_smollm2_and_refuses_another(tmp_path):
    """EnvConfig.probes on a real-data task: a PUlSE probe for SmolLM2 becomes a scalar signal (the PUlSE
    trigger's input); a probe saved for another model is a clear error."""
    import numpy as np

    from envs.registration import make_env
    from policies.probes.probe import FeatureSpec, FitConfig, fit_probe

    spec = FeatureSpec("pulse", layers=(7, 27), pooling="mean")
    rng = np.random.default_rng(0)
    X = spec.compute(hidden_mean=rng.normal(size=(40, 31, 576)).astype(np.float32))
    y = np.r_[np.zeros(20), np.ones(20)].astype(np.int8)
    for mid, name in (("hf:smollm2-135m-instruct", "ok"), ("micro:micro", "other")):
        probe, _ = fit_probe(spec, X, y, np.arange(0, 40, 2), np.arange(1, 40, 2), model_id=mid,
                             fit=FitConfig(max_epochs=2))
        probe.save(tmp_path / name)
    cfg = {"task": "hotpotqa", "reasoner": "hf", "split": "dev[0:2]", "max_steps": 2, "max_step_tokens": 16,
           "signals": ["output"], "probes": {"pulse_prob": str(tmp_path / "ok")}}
    env = make_env(None, cfg)
    _, info = env.reset(options={"question_index": 0})
    assert 0.0 <= info["signals"]["pulse_prob"] <= 1.0
    with pytest.raises(Exception, match="micro:micro"):
        make_env(None, {**cfg, "probes": {"pulse_prob": str(tmp_path / "other")}})
