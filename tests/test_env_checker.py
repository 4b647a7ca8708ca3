"""Every registered Gymnasium id (:data:`envs.gym_ids.GYM_IDS`) passes Gymnasium's own ``check_env`` and refuses
misuse with typed errors: ``step()`` before ``reset()`` or after the episode ended, ``reset(options=…)`` with an
unknown key or a question index that is not a plain integer in range, non-positive token budgets and negative caps.

The micro-world ids run on the shipped artifact (cheap settings); ``kairos/HotpotQA-v0`` needs SmolLM2 and the
HotpotQA file: it is marked slow and skips, saying so, where they are absent.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401 — registers the ids
from envs.core.config import ConfigError
from envs.gym_ids import GYM_IDS
from envs.retrieval_env import EnvUsageError, ResetNeeded

#: cheap settings per id (the micro-world: output signals only, a short episode)
CHEAP = {"kairos/RetrievalTiming-v0": {"split": "dev", "signals": ["output"], "max_steps": 3},
         "kairos/MicroWorld-v0": {"split": "dev", "signals": ["output"], "max_steps": 3},
         "kairos/HotpotQA-v0": {"split": "dev[0:2]", "signals": ["output"], "max_steps": 2, "max_step_tokens": 16}}

IDS = [pytest.param(i, marks=pytest.mark.slow) if GYM_IDS[i].get("preset") == "hotpotqa" else i for i in GYM_IDS]


def _make(env_id: str, **over):
    try:
        return gym.make(env_id, config={**CHEAP[env_id], **over})
    except (FileNotFoundError, ImportError, OSError) as e:  # a model or data file this machine lacks
        if GYM_IDS[env_id].get("preset") == "hotpotqa":
            pytest.skip(f"{env_id} needs SmolLM2 and HotpotQA: {e}")
        raise


def test_every_registered_id_is_covered():
    assert set(CHEAP) == set(GYM_IDS), "a new registered id needs its cheap settings here"


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_and_misuse(env_id):
    from gymnasium.utils.env_checker import check_env

    env = _make(env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unbounded Box warnings: the signals are unbounded by design
            check_env(env.unwrapped, skip_render_check=True)
        u = env.unwrapped
        u.ep = None
        with pytest.raises(ResetNeeded, match="reset"):  # before reset
            u.step(0)
        # reset options: unknown keys and non-integer indices are refused, never ignored or coerced
        for bad, pattern in [({"question_idx": 0}, "unknown key 'question_idx'"),
                             ({"question_index": 2.7}, "must be an integer"),
                             ({"question_index": True}, "must be an integer"),
                             ({"question_index": "1"}, "must be an integer"),
                             ({"question_index": -1}, "out of range"),
                             ({"question_index": 10**9}, "out of range"),
                             ([("question_index", 0)], "must be a dict")]:
            with pytest.raises(EnvUsageError, match=pattern):
                u.reset(options=bad)
        obs, info = u.reset(options={"question_index": np.int64(1)})  # a numpy integer is an integer
        assert u.observation_space.contains(obs)
        with pytest.raises(EnvUsageError, match="outside the action space"):
            u.step(2)
        with pytest.raises(EnvUsageError, match="outside the action space"):
            u.step("1")
        # run to the end, then every further step is refused (no second final reward, no terminated=False)
        done = False
        for _ in range(50):
            obs, r, term, trunc, info = u.step(0)
            if term or trunc:
                done = True
                break
        assert done
        for a in (0, 1):
            with pytest.raises(ResetNeeded, match="episode ended"):
                u.step(a)
        u.reset(options={"question_index": 0})  # reset makes it usable again
        u.step(0)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", [i for i in GYM_IDS if GYM_IDS[i].get("preset") != "hotpotqa"])
@pytest.mark.parametrize("over,pattern", [
    ({"max_step_tokens": 0}, "max_step_tokens must be >= 1"),
    ({"max_step_tokens": -3}, "max_step_tokens must be >= 1"),
    ({"max_retrievals_per_question": -1}, "max_retrievals_per_question must be >= 0.*no 'unlimited'"),
    ({"max_retrievals_per_step": 0}, "max_retrievals_per_step must be >= 1"),
    ({"max_steps": 0}, "max_steps must be >= 1"),
    ({"top_k": 0}, "top_k"),
])
def test_bad_budgets_and_caps_are_config_errors(env_id, over, pattern):
    with pytest.raises(ConfigError, match=pattern):
        gym.make(env_id, config={**CHEAP[env_id], **over})


def test_zero_retrievals_per_question_means_never():
    """``max_retrievals_per_question: 0`` is valid: every retrieval is capped into an accept."""
    env = gym.make("kairos/MicroWorld-v0", config={**CHEAP["kairos/MicroWorld-v0"], "max_retrievals_per_question": 0})
    u = env.unwrapped
    u.reset(options={"question_index": 0})
    _, _, _, _, info = u.step(1)
    assert info["capped"] and info["retrievals"] == 0
    env.close()


def test_generate_steps_refuses_a_zero_budget():
    """The generation loop itself names the budget (no IndexError deep in stepgen)."""
    from agents.reasoners.stepgen import generate_steps

    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        generate_steps(None, [], stop_ids=set(), header_end_id=None, pad_id=0, max_new_tokens=0)
