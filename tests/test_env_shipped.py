"""The env on the shipped micro-world: real steps, real retrieval, labels, and the oracle beating never."""

import gymnasium as gym
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
