"""The env on the shipped micro-world: real steps, real retrieval, labels, and the oracle beating never."""

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401
from envs.microworld.artifact import DEFAULT_ARTIFACT
from policies.triggers import NeverTrigger, OracleTrigger

pytestmark = pytest.mark.skipif(not (DEFAULT_ARTIFACT / "manifest.json").is_file(),
                                reason=f"no shipped artifact at {DEFAULT_ARTIFACT}")


@pytest.fixture(scope="module")
def env():
    e = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"]})
    return e.unwrapped


def _episode(env, trig, idx):
    obs, info = env.reset(options={"question_index": idx})
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(trig.decide(obs, info))
        done = term or trunc
    return info


def test_real_steps_have_real_signals_and_labels(env):
    obs, info = env.reset(seed=1)
    assert obs["mask"].tolist() == [1.0, 1.0, 1.0]
    assert info["step_text"].startswith("Step 1 :")
    assert info["label"] in ("correct", "wrong", "off_chain", "unparseable")
    obs, r, term, trunc, info = env.step(1)
    assert info["query"] and len(info["passage_ids"]) == 1


def test_oracle_labels_fix_errors(env):
    never = oracle = 0.0
    n = 40
    for i in range(n):
        never += _episode(env, NeverTrigger(), i)["quality"]
        oracle += _episode(env, OracleTrigger(), i)["quality"]
    assert oracle > never


def test_probe_signal_through_the_env_and_mismatch_error(tmp_path, tiny_world):
    import subprocess
    import sys

    from policies.probes.probe import ProbeMismatchError
    from policies.triggers import ThresholdTrigger

    out = tmp_path / "pulse"
    r = subprocess.run([sys.executable, "-m", "eval", "probe", "train", "--signal", "pulse", "--layers", "0,6",
                        "--n-questions", "120", "--n-eval-questions", "0", "--max-epochs", "5", "--out", str(out),
                        "--cache-dir", str(tmp_path / "steps")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "probes": {"pulse_prob": str(out)}}).unwrapped
    info = _episode(env, ThresholdTrigger("pulse_prob", 0.5, name="PUlSE"), 0)
    assert "quality" in info
    obs, info = env.reset(seed=0)
    assert 0.0 <= info["signals"]["pulse_prob"] <= 1.0
    with pytest.raises(ProbeMismatchError, match="was trained for model"):
        gym.make("kairos/MicroWorld-v0", config={"artifact": str(tiny_world.path), "probes": {"p": str(out)}})


@pytest.mark.slow
def test_seakr_eigenscore_as_an_env_signal():
    """signals: [..., eigen] exposes SeaKR's EigenScore (k sampled continuations per step) as obs + scalar."""
    from policies.triggers import ThresholdTrigger

    env = gym.make("kairos/MicroWorld-v0", config={"split": "dev", "rsus_components": ["ent"],
                                                   "signals": ["output", "eigen"]}).unwrapped
    obs, info = env.reset(options={"question_index": 0})
    assert obs["eigen"].shape == (1,) and np.isfinite(obs["eigen"]).all()
    assert "eigenscore" in info["signals"] and "eigenscore" in env.c.scalar_names()
    info = _episode(env, ThresholdTrigger("eigenscore", -1e9, "above", name="SeaKR"), 1)
    assert info["retrievals"] >= 1
    with pytest.raises(ValueError, match="micro-world reasoner only"):
        from envs.components import _extractor
        from envs.env_config import EnvConfig

        _extractor(EnvConfig(signals=["eigen"]), env.c.reasoner, 1, 1, ["x"], "hf")
