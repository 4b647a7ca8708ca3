"""Cost-conditioned policies: the env observes and draws λ, the warm start's labels at any λ equal the env's own, the
fit learns a rule that moves with λ, curricula widen the range, and the budget is a run-time setting."""

from __future__ import annotations

import numpy as np
import pytest

from envs.core.config import ConfigError
from envs.costs import cost_feature
from envs.env_config import EnvConfig
from train.conditioning import CostSampler, labels_at
from train.warmstart import WarmStartOptions, counterfactual_labels, fit_policy

ENV = {"split": "train", "rsus_components": ["ent"], "signals": ["output"], "query_modes": ["info_need", "step"],
       "querygen": True, "max_retrievals_per_question": 1}


def _env(**kw) -> EnvConfig:
    return EnvConfig.from_preset("microworld", {**ENV, **kw})


def test_the_env_observes_its_cost_weights_and_draws_them_per_episode():
    from envs.retrieval_env import EnvUsageError, RetrievalTimingEnv

    cfg = _env(observe_costs=["retrieval_calls"])
    env = RetrievalTimingEnv(cfg)
    assert env.observation_space["costs"].shape == (1,)
    obs, _ = env.reset(seed=0)
    assert obs["costs"][0] == pytest.approx(cost_feature(0.1))
    env.set_cost_ranges({"retrieval_calls": (0.02, 0.5)})
    drawn = []
    for s in range(40):
        obs, info = env.reset(seed=s)
        lam = env.get_cost_weights()["retrieval_calls"]
        drawn.append(lam)
        assert obs["costs"][0] == pytest.approx(cost_feature(lam), abs=1e-6) and 0.02 <= lam <= 0.5
    assert len(set(drawn)) == 40 and np.median(np.log(drawn)) == pytest.approx(np.log(0.1), abs=0.6)  # log-uniform
    env.reset(seed=3)
    again = env.get_cost_weights()["retrieval_calls"]
    assert again == drawn[3]  # the draw is the seed's
    _, r, *_ = env.step((1, 0))
    assert r == pytest.approx(-again)
    # a budget per episode through reset's options (what a pipeline gives each question)
    env.set_cost_ranges({})
    obs, _ = env.reset(options={"question_index": 2, "cost_weights": {"retrieval_calls": 0.3}})
    assert obs["costs"][0] == pytest.approx(cost_feature(0.3)) and env.get_cost_weights()["retrieval_calls"] == 0.3
    with pytest.raises(EnvUsageError, match="cost_weights"):
        env.reset(options={"question_index": 2, "cost_weights": {"tokens": 0.3}})
    with pytest.raises(ValueError, match="0 < low <= high"):
        env.set_cost_ranges({"retrieval_calls": (0.0, 0.5)})
    # observing the costs changes no record: the cache namespace is the same
    assert env.c.namespace == RetrievalTimingEnv(_env()).c.namespace
    env.close()
    with pytest.raises(ConfigError, match="observe_costs"):
        _env(observe_costs=["tokens"])


def test_labels_at_another_lambda_equal_the_labels_the_env_gives_at_it(tmp_path):
    """The warm start records each branch's quality and raw costs: the labels at any λ are arithmetic, and equal the
    labels counted again by the env at that λ (a latency cost too)."""
    costs = {"retrieval_calls": 0.1, "latency": 0.5}
    cfg = _env(cache_path=str(tmp_path / "c.sqlite"), costs=costs)
    qs = list(range(6))
    opts = WarmStartOptions(enabled=True, batch_envs=6)
    at_01 = counterfactual_labels(cfg, qs, opts, 0.1, tmp_path / "a", progress=False)
    assert at_01["cost_names"] == ["retrieval_calls", "latency"]
    w = np.tile([0.1, 0.5], (len(at_01["y"]), 1))
    assert np.allclose(labels_at(at_01, w)["delta_modes"], at_01["delta_modes"], atol=1e-9)
    at_03 = counterfactual_labels(cfg, qs, opts, 0.3, tmp_path / "b", progress=False)
    w3 = np.tile([0.3, 0.5], (len(at_01["y"]), 1))
    again = labels_at(at_01, w3)
    assert np.allclose(again["delta_modes"], at_03["delta_modes"], atol=1e-9)
    assert np.array_equal(again["y"], at_03["y"]) and np.allclose(again["base_reward"], at_03["base_reward"],
                                                                  atol=1e-6)


def _budget_data(n: int = 600, seed: int = 0) -> dict:
    """Decisions whose retrieve branch gains v ∈ {0.04, 0.25} in quality (feature 0 says which) for one call: at
    budget λ retrieving pays exactly where v > λ."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    v = np.where(x[:, 0] > 0, 0.25, 0.04)
    z = np.zeros(n)
    data = {"cost_names": ["retrieval_calls"], "q_base": z, "c_base": z[:, None], "q_accept": z,
            "c_accept": z[:, None], "q_modes": v[:, None], "c_modes": np.ones((n, 1, 1)),
            "base_action": np.zeros(n, dtype=np.int64), "question": np.arange(n) // 3,
            "obs": {"output": x, "costs": np.zeros((n, 1), dtype=np.float32)}}
    return {**data, **labels_at(data, np.full((n, 1), 0.1))}


def test_the_conditioned_fit_learns_a_rule_that_moves_with_the_budget():
    import torch

    from policies.rl.net import PolicySpec

    data = _budget_data()
    sampler = CostSampler(["retrieval_calls"], {"retrieval_calls": 0.1}, {"retrieval_calls": (0.02, 0.5)},
                          ["retrieval_calls"])
    spec = PolicySpec(fields={"output": 2, "costs": 1}, arch="mlp")
    net, fit = fit_policy(data, spec, WarmStartOptions(enabled=True, epochs=40), seed=0, sampler=sampler)
    x = torch.as_tensor(data["obs"]["output"])
    big = data["obs"]["output"][:, 0] > 0
    # (λ, retrieve where v = 0.25, where v = 0.04): far from each boundary (near one the weights |ΔR| vanish)
    for lam, want_big, want_small in ((0.02, 1, None), (0.1, 1, 0), (0.5, 0, 0)):
        feats = torch.full((len(x), 1), cost_feature(lam))
        with torch.no_grad():
            p = torch.softmax(net.forward_heads({"output": x, "costs": feats})["retrieve_logits"], -1)[:, 1].numpy()
        assert np.mean((p > 0.5)[big] == want_big) > 0.9, lam
        assert want_small is None or np.mean((p > 0.5)[~big] == want_small) > 0.9, lam
    with pytest.raises(ValueError, match="observes 'costs'"):
        fit_policy(data, PolicySpec(fields={"output": 2}, arch="mlp"), WarmStartOptions(enabled=True, epochs=1),
                   sampler=sampler)
    # without a sampler the same data fits one λ (the labels' own), as before
    fit_policy(data, spec, WarmStartOptions(enabled=True, epochs=1), seed=0)


def test_curricula_widen_a_range_and_configs_say_what_is_missing():
    from train.config import TrainConfig
    from train.curriculum import Curriculum, ScheduleConfig

    c = Curriculum({"retrieval_calls": {"kind": "exponential", "start": 0.5, "end": 0.02, "iterations": 4,
                                        "high": 0.5},
                    "latency": {"kind": "constant", "start": 0.5, "end": 0.5}})
    assert c.weights(0) == {"latency": 0.5}
    assert c.ranges(0) == {"retrieval_calls": (0.5, 0.5)}
    assert c.ranges(4)["retrieval_calls"][0] == pytest.approx(0.02)
    assert c.ranges(2)["retrieval_calls"][0] == pytest.approx(0.1)
    assert c.final() == {"retrieval_calls": (0.02, 0.5), "latency": 0.5}
    with pytest.raises(ConfigError, match="high"):
        ScheduleConfig.from_dict({"kind": "linear", "start": 0.0, "end": 0.1, "high": 0.5})
    raw = {"env_config": {"split": "train", "rsus_components": ["ent"]},
           "curriculum": {"retrieval_calls": {"kind": "constant", "start": 0.02, "high": 0.5}}}
    with pytest.raises(ConfigError, match="add 'retrieval_calls' to env_config.observe_costs"):
        TrainConfig.from_dict(raw)
    raw["env_config"]["observe_costs"] = ["retrieval_calls"]
    assert TrainConfig.from_dict(raw).curriculum["retrieval_calls"].high == 0.5
    with pytest.raises(ConfigError, match="counterfactual labels only"):
        TrainConfig.from_dict({**raw, "warmstart": {"enabled": True, "kind": "dagger"}})


def _budget_policy(tmp_path):
    """A policy that reads only the budget: retrieve when λ < 0.2 (fitted on :func:`_budget_data` with v = 0.2)."""
    from policies.rl.export import export_policy
    from policies.rl.net import PolicySpec

    data = _budget_data()
    data["q_modes"] = np.full_like(data["q_modes"], 0.2)
    data.update(labels_at(data, np.full((len(data["y"]), 1), 0.1)))
    data["obs"] = {"costs": data["obs"]["costs"]}
    sampler = CostSampler(["retrieval_calls"], {"retrieval_calls": 0.1}, {"retrieval_calls": (0.02, 0.5)},
                          ["retrieval_calls"])
    net, _ = fit_policy(data, PolicySpec(fields={"costs": 1}, arch="mlp"), WarmStartOptions(enabled=True, epochs=30),
                        seed=0, sampler=sampler)
    env = {**_env(observe_costs=["retrieval_calls"]).to_dict(), "querygen": False}
    return export_policy(net, tmp_path / "budget_policy", heads=("retrieve",), env_config=env)


def test_the_budget_is_a_run_time_setting_of_a_pipeline(tmp_path):
    from kairos import Pipeline

    path = _budget_policy(tmp_path)
    q = ["Which company does Teimshox 's mother work for ?", "Where was Teimshox 's father born ?"]
    with Pipeline.from_policy(path) as p:
        assert p.reads_budget
        cheap, dear = p.answer_many(q, lam=0.05), p.answer_many(q, lam=0.4)
        assert all(a.calls >= 1 for a in cheap) and all(a.calls == 0 for a in dear)
        assert cheap[0].cost_weights["retrieval_calls"] == 0.05
        mixed = p.answer_many(q, lam=[0.4, 0.05])  # one budget per question, in one batch
        assert [a.calls == 0 for a in mixed] == [True, False]
        with pytest.raises(ValueError, match=r"in \[0, 100\]"):
            p.answer(q[0], lam=-1)
        with pytest.raises(ValueError, match="2 budgets for 1 questions"):
            p.answer_many(q[:1], lam=[0.1, 0.2])
    with Pipeline.from_policy(path, lam=0.4) as p:
        assert p.answer(q[0]).calls == 0 and p.answer(q[0], lam=0.05).calls >= 1
    with pytest.raises(ValueError, match="does not read a budget"):
        Pipeline("never", {"reasoner": "micro", "rsus_components": ["ent"]}, lam=0.1)


def test_kairos_answer_takes_the_budget(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    path = _budget_policy(tmp_path)
    q = "Which company does Teimshox 's mother work for ?"
    calls = {}
    for lam in ("0.05", "0.4"):
        r = subprocess.run([sys.executable, "-m", "eval", "answer", "--policy", str(path), "--lambda", lam, "--json",
                            q], cwd=repo, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        calls[lam] = json.loads(r.stdout.splitlines()[-1])["calls"]
    assert calls["0.05"] >= 1 and calls["0.4"] == 0
    r = subprocess.run([sys.executable, "-m", "eval", "answer", "--policy", "never", "--lambda", "0.1", q], cwd=repo,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "does not read a budget" in r.stderr and "Traceback" not in r.stderr
