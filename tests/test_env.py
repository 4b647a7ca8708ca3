"""The retrieval-timing env contract on a tiny micro-world (fast; the LM is untrained but deterministic)."""

import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the ids)
from policies.triggers import AlwaysTrigger, NeverTrigger, RandomTrigger, ThresholdTrigger


@pytest.fixture()
def cfg(tiny_world, tmp_path):
    return {"artifact": str(tiny_world.path), "max_steps": 4, "max_step_tokens": 12,
            "cache_path": str(tmp_path / "cache.sqlite"), "rsus_components": ["ent"]}


def _run(env, policy, seed):
    obs, info = env.reset(seed=seed)
    policy.reset(seed)
    trace, total, done = [], 0.0, False
    while not done:
        a = policy.decide(obs, info)
        obs, r, term, trunc, info = env.step(a)
        total += r
        trace.append((a, info["step_text"], round(r, 6), info["passage_ids"]))
        done = term or trunc
    return trace, total, info


@pytest.mark.parametrize("querygen", [False, True])
def test_check_env_passes(cfg, querygen):
    env = gym.make("kairos/MicroWorld-v0", config={**cfg, "querygen": querygen})
    check_env(env.unwrapped)
    if querygen:
        assert isinstance(env.action_space, gym.spaces.Tuple) and env.action_space[1].n == 4


def test_same_seed_same_episode_and_cache_replay(cfg):
    env = gym.make("kairos/MicroWorld-v0", config=cfg)
    pol = RandomTrigger(0.5, seed=1)
    a = _run(env.unwrapped, pol, seed=7)
    b = _run(env.unwrapped, pol, seed=7)  # replayed from the trajectory cache
    assert a[0] == b[0] and a[1] == b[1]
    fresh = gym.make("kairos/MicroWorld-v0", config={**cfg, "cache_path": None})
    c = _run(fresh.unwrapped, pol, seed=7)  # regenerated without any cache
    assert [t[1] for t in a[0]] == [t[1] for t in c[0]]
    assert env.unwrapped.cache.hits > 0


def test_observation_info_and_costs(cfg):
    env = gym.make("kairos/MicroWorld-v0", config={**cfg, "costs": {"retrieval_calls": 0.3, "tokens": 0.01}})
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert set(obs) == {"pulse", "output", "rsus", "history", "mask"}
    # the tiny LM is untrained: a step without content masks its signals (zeros + mask 0), never fakes them
    for g, m in zip(["pulse", "output", "rsus"], obs["mask"]):
        assert m in (0.0, 1.0)
        if m == 0.0:
            assert not obs[g].any()
    obs, r, term, trunc, info = env.step(1)
    assert info["costs"]["retrieval_calls"] == 1.0 and info["costs"]["tokens"] > 0
    assert "query" in info and "passage_ids" in info  # the tiny LM writes empty steps: see test_env_shipped
    expected = -(0.3 * 1.0 + 0.01 * info["costs"]["tokens"]) + info.get("quality", 0.0)
    assert r == pytest.approx(expected)
    env.unwrapped.set_cost_weights({"retrieval_calls": 0.0, "tokens": 0.0})
    assert env.unwrapped.get_cost_weights() == {"retrieval_calls": 0.0, "tokens": 0.0}
    with pytest.raises(ValueError, match="unknown cost 'nope'"):
        env.unwrapped.set_cost_weights({"nope": 1.0})


def test_retrieval_caps_and_first_unused_passage(cfg):
    env = gym.make("kairos/MicroWorld-v0", config={**cfg, "max_retrievals_per_question": 2, "max_steps": 6})
    trace, _, info = _run(env.unwrapped, AlwaysTrigger(), seed=2)
    ids = [p for t in trace for p in t[3]]
    assert len(ids) <= 2 and len(set(ids)) == len(ids)
    assert info["retrievals"] <= 2


def test_user_cost_by_dotted_path_in_config(cfg, tmp_path, monkeypatch):
    (tmp_path / "kcost.py").write_text(textwrap.dedent("""
        class PerStep:
            name = "per_step"
            def __call__(self, event):
                return 1.0
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("kcost", None)
    env = gym.make("kairos/MicroWorld-v0", config={**cfg, "costs": {"kcost:PerStep": 0.25}})
    env.reset(seed=0)
    _, r, term, trunc, info = env.step(0)
    assert info["costs"] == {"kcost:PerStep": 1.0}
    assert r == pytest.approx(-0.25 + info.get("quality", 0.0))


def test_every_fixed_trigger_runs_through_the_env(cfg):
    from policies.triggers import OracleTrigger, SingleTrigger

    env = gym.make("kairos/MicroWorld-v0", config=cfg).unwrapped
    for trig in [NeverTrigger(), AlwaysTrigger(), SingleTrigger(), RandomTrigger(0.3),
                 ThresholdTrigger("minprob", 0.5, "below"), ThresholdTrigger("rsus", 0.65, "above"),
                 OracleTrigger()]:
        trace, total, info = _run(env, trig, seed=4)
        assert "quality" in info and np.isfinite(total), trig.describe()
    with pytest.raises(KeyError, match="signal 'pulse_prob' is not in info"):
        _run(env, ThresholdTrigger("pulse_prob", 0.5), seed=4)


def test_bad_actions_and_configs(cfg):
    from envs.core.config import ConfigError

    env = gym.make("kairos/MicroWorld-v0", config=cfg).unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space"):
        env.step(2)
    with pytest.raises(ConfigError, match="unknown config key 'max_stepz'"):
        gym.make("kairos/MicroWorld-v0", config={**cfg, "max_stepz": 3})
    with pytest.raises(ValueError, match="unknown cost 'latencyy'"):
        gym.make("kairos/MicroWorld-v0", config={**cfg, "costs": {"latencyy": 1.0}})
    with pytest.raises(ValueError, match="unknown preset"):
        gym.make("kairos/RetrievalTiming-v0", preset="nope")


def test_retrieval_caps_share_the_cache_namespace_and_records():
    """A capped 'retrieve' is recorded as an accept, so a run with max_retrievals_per_question = 1 reads the
    records of an uncapped run (same action prefixes, same records); settings that change outcomes do not."""
    from envs.components import _namespace
    from envs.env_config import EnvConfig
    from envs.registration import make_env

    base = EnvConfig(split="test", signals=["output"], rsus_components=["ent"])
    assert _namespace("micro", ["x"], base) == _namespace("micro", ["x"], base.replace(max_retrievals_per_question=1))
    assert _namespace("micro", ["x"], base) != _namespace("micro", ["x"], base.replace(top_k=2))
    capped = make_env(None, base.replace(max_retrievals_per_question=1))
    free = make_env(None, base)
    for env in (capped, free):
        env.reset(options={"question_index": 1})
    texts = []
    for env in (capped, free):
        _, _, _, _, i1 = env.step(1)
        _, _, _, _, i2 = env.step(1 if env is capped else 0)  # capped: the retrieve becomes an accept
        texts.append((i1["step_text"], i2["step_text"], i2["action_prefix"]))
    assert texts[0] == texts[1] and capped.unwrapped.ep.retrievals == 1


def test_configured_rsus_component_without_a_source_is_masked_not_zero():
    """U_verb configured on a reasoner that cannot answer the confidence prompt (and no proxy): masked and listed,
    never reported as a real 0 (the rsus group carries each component's availability flag)."""
    from envs.registration import make_env

    env = make_env("microworld", {"split": "dev", "rsus_components": ["ent", "verb"]})
    obs, info = env.reset(options={"question_index": 0})
    assert "u_verb" in info["masked_signals"] and "u_verb" not in info["signals"]
    assert "u_ent" in info["signals"] and "u_ent" not in info["masked_signals"]
    assert obs["rsus"].shape == (7,) and obs["rsus"][4] == 0.0 and obs["rsus"][5] == 1.0
    env.close()


def test_rsus_options_gate_u_cons_at_discourse_markers():
    """U_cons with discourse-marker gating (EnvConfig.rsus_options): micro-world steps carry no marker, so U_cons is
    masked at every step, while without gating it is computed from k sampled alternatives."""
    from envs.core.config import ConfigError
    from envs.registration import make_env

    gated = make_env("microworld", {"split": "dev", "rsus_components": ["ent", "cons"],
                                    "rsus_options": {"cons_only_at_markers": True, "n_samples": 2}})
    _, info = gated.reset(options={"question_index": 1})
    assert "u_cons" in info["masked_signals"] and "u_ent" in info["signals"]
    plain = make_env("microworld", {"split": "dev", "rsus_components": ["ent", "cons"], "rsus_options": {"n_samples": 2}})
    _, info = plain.reset(options={"question_index": 1})
    assert "u_cons" in info["signals"] and 0.0 <= info["signals"]["u_cons"] <= 1.0
    assert gated.c.namespace != plain.c.namespace
    with pytest.raises(ConfigError, match="EnvConfig.rsus_options: unknown config key 'w_verb'"):
        make_env("microworld", {"rsus_options": {"w_verb": 1.0}})
    with pytest.raises(ConfigError, match="EnvConfig.rsus_options.n_samples must be an integer >= 1"):
        make_env("microworld", {"rsus_options": {"n_samples": 0}})


def test_u_cons_samples_are_paid_by_their_step(tmp_path):
    """U_cons's k samples are charged to the step they measure (as EigenScore's and U_verb's side turn are): the
    record's tokens are the step's own plus exactly the samples' tokens (the same step in an env without U_cons,
    and in one whose marker gating skips the sampling, has its own only); U_cons is the value RSUS computes from
    the reasoner's own call on the same state (the same samples); a replay from the trajectory cache keeps both;
    the cost shows in info and, through the token count, in the observation's history."""
    import pickle

    from agents.signals.rsus import u_cons
    from envs.registration import make_env

    base = {"split": "dev", "signals": ["output", "rsus"], "rsus_options": {"n_samples": 3}}
    plain = make_env("microworld", {**base, "rsus_components": ["ent"], "cache_path": str(tmp_path / "p.sqlite")})
    _, ip = plain.reset(options={"question_index": 1})
    gated = make_env("microworld", {**base, "rsus_components": ["ent", "cons"],
                                    "rsus_options": {"n_samples": 3, "cons_only_at_markers": True}})
    _, ig = gated.reset(options={"question_index": 1})
    cfg = {**base, "rsus_components": ["ent", "cons"], "cache_path": str(tmp_path / "c.sqlite")}
    env = make_env("microworld", cfg)
    obs, info = env.reset(options={"question_index": 1})
    assert info["step_text"] == ip["step_text"] == ig["step_text"]
    c = env.unwrapped.c
    alts = c.reasoner.sample_alternatives(c.reasoner.start(c.question_text(env.unwrapped.ep.q)), 3, seed=0 + 1)
    assert pickle.loads(pickle.dumps(alts)).tokens == alts.tokens >= 3  # (a reasoner service's reply keeps it)
    assert info["tokens"] == ip["tokens"] + alts.tokens and ig["tokens"] == ip["tokens"]
    assert info["signals"]["u_cons"] == pytest.approx(u_cons(list(alts)), abs=1e-6)
    assert obs["history"][2] == pytest.approx(info["tokens"] / 100.0)
    assert c.namespace != plain.unwrapped.c.namespace  # records made before the charge are never read back
    again = make_env("microworld", cfg)  # read back from the cache, not sampled again
    _, i2 = again.reset(options={"question_index": 1})
    assert (i2["tokens"], i2["signals"]["u_cons"]) == (info["tokens"], info["signals"]["u_cons"])
    assert again.unwrapped.cache.hits > 0
    for e in (plain, gated, env, again):
        e.close()


def test_a_probe_on_a_step_without_hidden_states_is_masked_not_an_error(cfg):
    """A step with no content tokens has no pooled hidden states: a probe signal (PUlSE / ReProbe probes,
    ``EnvConfig.probes``) is masked there — listed in ``info["masked_signals"]`` — as PUlSE itself is; it used to
    stop the episode (seen in the 4-mode cache oracle, whose long evidence leaves some steps empty)."""
    from agents.signals.base import SignalUnavailable
    from policies.probes import FeatureSpec

    spec = FeatureSpec("pulse", layers=(0, 1))
    env = gym.make("kairos/MicroWorld-v0", config=cfg).unwrapped
    calls = []

    def probe(step, state):
        calls.append(step.hidden_mean is not None)
        return float(spec.step_features(step).mean())

    env.c.probes["p"] = probe  # a live probe over the same features as policies.probes.Probe
    masked = 0
    for q in range(4):
        obs, info = env.reset(options={"question_index": q})
        done = False
        while True:
            assert ("p" in info["signals"]) != ("p" in info["masked_signals"])
            masked += "p" in info["masked_signals"]
            if done:
                break
            obs, _, te, tr, info = env.step(1)
            done = te or tr
    assert masked > 0 and calls.count(False) > 0  # steps without states were met, and masked
    # the reasoner service scores probes next to the model through the same function: NaN there, masked by the env
    from envs.components import probe_value

    assert np.isnan(probe_value(probe, step_without_states := type("S", (), {
        "index": 3, "hidden_mean": None, "hidden_last": None, "meta": {}, "content": ""})(), None))
    assert probe_value(lambda st, state: 0.25, step_without_states, None) == 0.25
    with pytest.raises(SignalUnavailable, match="step 3 has no captured hidden states"):
        spec.step_features(step_without_states)
