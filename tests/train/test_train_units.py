"""Fast unit tests of the training pieces: the REINFORCE loss (hand-computed), the action distribution,
the policy net (freeze, export, load, Trigger wrapper), schedules, config and the curriculum applier."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from envs.core.config import ConfigError
from policies.rl.export import LearnedTrigger, export_policy, load_policy
from policies.rl.net import PolicyNet, PolicySpec, floor_logits
from train.config import TrainConfig
from train.curriculum import Curriculum, ScheduleConfig, apply_cost_weights, schedule_value
from train.reinforce import reinforce_loss

LOGP = torch.tensor([-0.5, -1.0, -0.2])
ENT = torch.tensor([0.6, 0.5, 0.4])
RET = torch.tensor([1.0, 0.0, 0.5])
VAL = torch.tensor([0.2, 0.1, 0.4])


@pytest.mark.parametrize("baseline,normalize,expected", [
    # none: -mean(logp·G) = -mean(-0.5, 0, -0.1) = 0.2; entropy bonus 0.1·0.5
    ("none", False, 0.2 - 0.05),
    # mean: A = G − 0.5 = (0.5, −0.5, 0) → -mean(−0.25, 0.5, 0) = −1/12
    ("mean", False, -1 / 12 - 0.05),
    # value: A = G − V = (0.8, −0.1, 0.1) → -mean(−0.4, 0.1, −0.02) = 0.32/3; vf = mean(.64,.01,.01) = 0.22
    ("value", False, 0.32 / 3 - 0.05 + 0.5 * 0.22),
    # none + scaling: A = G / std(G), std = sqrt(1/6)
    ("none", True, 0.2 / math.sqrt(1 / 6) - 0.05),
])
def test_reinforce_loss_hand_computed(baseline, normalize, expected):
    out = reinforce_loss(LOGP, ENT, RET, VAL, baseline=baseline, normalize_advantages=normalize,
                         entropy_coeff=0.1, vf_loss_coeff=0.5)
    assert float(out["total_loss"]) == pytest.approx(expected, abs=1e-5)
    assert float(out["entropy"]) == pytest.approx(0.5)


def test_value_baseline_is_detached_in_policy_term():
    v = VAL.clone().requires_grad_(True)
    logp = LOGP.clone().requires_grad_(True)
    out = reinforce_loss(logp, ENT, RET, v, baseline="value", normalize_advantages=False, entropy_coeff=0.0,
                         vf_loss_coeff=1.0)
    out["total_loss"].backward()
    # only the MSE reaches V: d/dV mean((V−G)²) = 2(V−G)/n
    assert torch.allclose(v.grad, 2 * (VAL - RET) / 3, atol=1e-6)
    assert torch.allclose(logp.grad, -(RET - VAL) / 3, atol=1e-6)
    with pytest.raises(ValueError):
        reinforce_loss(LOGP, ENT, RET, None, baseline="value", normalize_advantages=False, entropy_coeff=0.0)


def test_querygen_logp_counts_only_when_retrieving():
    from policies.rl.module import RetrieveQueryDistribution

    logits = torch.log(torch.tensor([[0.75, 0.25, 0.1, 0.2, 0.3, 0.4]] * 2))
    d = RetrieveQueryDistribution.from_logits(logits)
    lp = d.logp((torch.tensor([0, 1]), torch.tensor([3, 3])))
    p_mode = torch.softmax(logits[0, 2:], -1)[3]
    assert lp[0] == pytest.approx(math.log(0.75), abs=1e-5)
    assert lp[1] == pytest.approx(math.log(0.25) + math.log(float(p_mode)), abs=1e-5)
    h_mode = -(torch.softmax(logits[0, 2:], -1) * torch.log_softmax(logits[0, 2:], -1)).sum()
    h_r = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert float(d.entropy()[0]) == pytest.approx(h_r + 0.25 * float(h_mode), abs=1e-5)
    r, m = d.to_deterministic().sample()
    assert r.tolist() == [0, 0] and m.tolist() == [3, 3]
    plain = RetrieveQueryDistribution.from_logits(logits[:, :2])
    assert plain.sample().shape == (2,)


def test_exploration_floor_keeps_argmax():
    lp = floor_logits(torch.tensor([[10.0, -10.0]]), 0.05)
    p = lp.exp()[0]
    assert float(p[1]) == pytest.approx(0.05, abs=1e-4) and float(p.sum()) == pytest.approx(1.0)
    assert int(lp.argmax()) == 0


FIELDS = {"pulse": 12, "output": 4, "rsus": 4, "history": 4, "mask": 3}


def _obs(b=5):
    return {k: torch.randn(b, n) for k, n in FIELDS.items()}


@pytest.mark.parametrize("arch", ["transformer", "mlp"])
def test_policy_net_shapes_and_freeze(arch):
    net = PolicyNet(PolicySpec(fields=FIELDS, n_modes=4, arch=arch))
    out = net.forward_heads(_obs())
    assert out["retrieve_logits"].shape == (5, 2) and out["mode_logits"].shape == (5, 4)
    assert out["value"].shape == (5,)
    net.freeze(["trunk", "retrieve"])
    assert all(not p.requires_grad for p in net.group_parameters("retrieve") + net.group_parameters("trunk"))
    assert all(p.requires_grad for p in net.group_parameters("query"))
    with pytest.raises(ValueError):
        net.group_parameters("nope")


def test_export_each_head_and_trigger(tmp_path):
    torch.manual_seed(0)
    net = PolicyNet(PolicySpec(fields=FIELDS, n_modes=4))
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.3)
    d_trig = export_policy(net, tmp_path / "trig", heads=("retrieve",))
    d_all = export_policy(net, tmp_path / "all", heads=("retrieve", "query", "value"))
    d_q = export_policy(net, tmp_path / "q", heads=("query",))
    obs = _obs(3)
    ref = net.forward_heads(obs)
    trig, meta = load_policy(d_trig)
    assert meta["heads"] == ["retrieve"]
    assert torch.allclose(trig.forward_heads(obs)["retrieve_logits"], ref["retrieve_logits"], atol=1e-6)
    full, _ = load_policy(d_all)
    assert torch.allclose(full.forward_heads(obs)["mode_logits"], ref["mode_logits"], atol=1e-6)
    qg, _ = load_policy(d_q)
    assert torch.allclose(qg.forward_heads(obs)["mode_logits"], ref["mode_logits"], atol=1e-6)
    assert "retrieve_head.weight" not in torch.load(d_q / "weights.pt")
    t = LearnedTrigger.load(d_trig)
    one = {k: v[0].numpy() for k, v in obs.items()}
    assert t.decide(one, {}) == int(ref["retrieve_logits"][0].argmax())
    tq = LearnedTrigger.load(d_all)
    r, m = tq.decide(one, {})
    assert m == int(ref["mode_logits"][0].argmax())
    export_policy(net, tmp_path / "trig", heads=("retrieve",))  # overwrite in place
    with pytest.raises(ValueError):
        export_policy(net, tmp_path / "x", heads=("bogus",))


def test_schedules():
    for kind in ("constant", "linear", "cosine", "exponential"):
        s = ScheduleConfig(kind=kind, start=0.5, end=0.1, iterations=10, delay=2)
        v = [schedule_value(s, i) for i in range(20)]
        assert v[0] == pytest.approx(0.5) and v[2] == pytest.approx(0.5)
        assert v[-1] == pytest.approx(0.5 if kind == "constant" else 0.1)
        assert all(a >= b - 1e-12 for a, b in zip(v, v[1:]))  # monotone non-increasing
    assert schedule_value(ScheduleConfig(kind="cosine", start=0.5, end=0.1, iterations=10), 5) == pytest.approx(0.3)
    assert Curriculum({"retrieval_calls": {"kind": "linear", "iterations": 4}}).weights(2) == {
        "retrieval_calls": pytest.approx(0.3)}


def test_config_yaml_and_unknown_keys(tmp_path):
    from pathlib import Path

    cfg = TrainConfig.from_yaml(Path(__file__).resolve().parents[2] / "configs" / "experiments" / "microworld" / "train_microworld.yaml")
    assert cfg.curriculum["retrieval_calls"].end == 0.1 and cfg.warmstart.enabled
    old = TrainConfig.from_yaml(Path(__file__).resolve().parents[2] / "configs" / "experiments" / "microworld" / "train_microworld_reinforce_only.yaml")
    assert old.curriculum["retrieval_calls"].start == 0.5 and not old.warmstart.enabled
    with pytest.raises(ConfigError, match="bogus"):
        TrainConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="basline"):
        TrainConfig.from_dict({"algo": {"basline": "mean"}})
    with pytest.raises(ConfigError):
        TrainConfig.from_dict({"algo": {"baseline": "median"}})
    with pytest.raises(ConfigError):
        TrainConfig.from_dict({"curriculum": {"retrieval_calls": {"kind": "zigzag"}}})
    assert TrainConfig.from_dict({"env": "hotpotqa"}).env == "hotpotqa"  # the real-data preset
    with pytest.raises(ConfigError, match="'microworld', 'hotpotqa' or 'module:factory'"):
        TrainConfig.from_dict({"env": "hotpot"})


def test_env_factory_builds_batched_preset_envs():
    """RLlib's env creator: the driver's EnvConfig (its preset applied on load) crosses to the EnvRunner as
    ``to_dict()`` and is rebuilt there as it was — the batched Kairos env."""
    from envs.vector import BatchedRetrievalEnv
    from train.env_factory import make_env
    from train.run import runner_env_config

    cfg = TrainConfig.from_dict({"env_config": {"split": "test", "rsus_components": ["ent"], "signals": ["output"],
                                                "cache_path": None}})
    ctx = runner_env_config(cfg)
    assert ctx["_env"] == "microworld" and ctx["reasoner"] == "micro"  # the preset's, applied on the driver
    env = make_env({**ctx, "num_envs": 2})
    assert isinstance(env, BatchedRetrievalEnv) and env.num_envs == 2
    assert env.envs[0].config == cfg.env_config


def test_model_config_names_the_env_query_modes_default_included():
    """The query head's mode names are the env's query_modes — its default list too (it used to be [] unless the
    YAML set the key), a custom factory's setting, or []."""
    from envs.env_config import EnvConfig
    from train.run import build_model_config

    assert build_model_config(TrainConfig())["query_modes"] == EnvConfig().query_modes
    cfg = TrainConfig.from_dict({"env_config": {"query_modes": ["info_need", "step"], "querygen": True}})
    assert build_model_config(cfg)["query_modes"] == ["info_need", "step"]
    toy = TrainConfig.from_dict({"env": "kairos_toy_env:make_toy_env", "env_config": {"querygen": True}})
    assert build_model_config(toy)["query_modes"] == [] and toy.env_config.to_dict() == {"querygen": True}


class _FakeRunner:
    def __init__(self, env):
        self.env = env


class _FakeGroup:
    def __init__(self, runners):
        self.runners = runners

    def foreach_env_runner(self, fn, local_env_runner=True):
        return [fn(r) for r in self.runners]


class _Broken(gym.Env):
    def set_cost_weights(self, w):
        raise RuntimeError("boom")


def test_apply_cost_weights_skips_missing_envs_and_never_raises():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from kairos_toy_env import ToyTimingEnv

    vec = gym.vector.SyncVectorEnv([lambda: ToyTimingEnv() for _ in range(2)])
    single = ToyTimingEnv()
    out = apply_cost_weights(_FakeGroup([_FakeRunner(None), _FakeRunner(vec), _FakeRunner(single),
                                         _FakeRunner(_Broken())]), {"retrieval_calls": 0.33})
    assert out[0] is None and out[1] == 2 and out[2] == 1 and "boom" in out[3]
    assert all(e.lam == 0.33 for e in vec.envs) and single.lam == 0.33
    assert np.isfinite(single.lam)


def test_running_normalizer_matches_full_data_statistics_and_exports(tmp_path):
    from policies.rl.net import squash

    torch.manual_seed(0)
    net = PolicyNet(PolicySpec(fields={"output": 4, "history": 2}, arch="mlp"))
    a = {"output": torch.rand(50, 4) * 3, "history": torch.randn(50, 2) * 10}
    b = {"output": torch.rand(30, 4), "history": torch.randn(30, 2)}
    net.update_normalizer(a)
    net.update_normalizer(b)
    for k in ("output", "history"):
        full = squash(torch.cat([a[k], b[k]]))
        torch.testing.assert_close(getattr(net, f"obs_mean_{k}"), full.mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(getattr(net, f"obs_var_{k}"), full.var(0, unbiased=False), atol=1e-5, rtol=1e-4)
    assert float(net.obs_count) == 80
    # standardised inputs: the field seen by the encoder has ~zero mean over the data
    x = net._field_input({k: torch.cat([a[k], b[k]]) for k in a}, "history")
    assert x.mean(0).abs().max() < 1e-4
    # buffers travel with exports; a spec without "normalize" (older exports) loads unnormalised
    export_policy(net, tmp_path / "p", heads=("retrieve",))
    net2, _ = load_policy(tmp_path / "p")
    torch.testing.assert_close(net2.obs_mean_output, net.obs_mean_output)
    assert PolicySpec.from_dict({"fields": {"x": 1}}).normalize is False


def test_train_cli_sweep_flag_is_not_a_config_override():
    import argparse

    from train.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--sweep"])
    assert args.run_sweep is True
    assert "sweep" not in TrainConfig.cli_overrides(args)


def test_drop_fields_removes_observation_fields_from_the_policy():
    from policies.rl.module import spec_from_spaces

    space = gym.spaces.Dict({k: gym.spaces.Box(-1, 1, (n,), np.float32) for k, n in FIELDS.items()})
    spec = spec_from_spaces(space, gym.spaces.Discrete(2), {"drop_fields": ["pulse"]})
    assert "pulse" not in spec.fields and set(spec.fields) == set(FIELDS) - {"pulse"}
    with pytest.raises(ValueError, match="drop_fields \\['nope'\\] are not observation fields"):
        spec_from_spaces(space, gym.spaces.Discrete(2), {"drop_fields": ["nope"]})


@pytest.mark.parametrize("over, match", [
    ({"curriculum": {"retrieval_calls": {"kind": "linear", "start": -0.5, "end": 0.1}}}, "start must be a finite λ >= 0"),
    ({"curriculum": {"retrieval_calls": {"kind": "constant", "start": float("nan"), "end": 0.1}}}, "finite λ"),
    ({"curriculum": {"latency": {"kind": "constant", "start": 0.1, "end": 0.1}}},
     "curriculum for cost 'latency', which the env does not charge"),
    ({"env_config": {"split": "train", "max_questoins": 5}}, "TrainConfig.env_config: unknown config key 'max_questoins'"),
    ({"env_config": {"signals": ["pulse", "contnet"]}}, "unknown observation group 'contnet'"),
    ({"env": "my_pkg.envs:make", "warmstart": {"enabled": True}}, "not a custom env factory 'my_pkg.envs:make'"),
])
def test_training_config_errors_surface_on_the_driver(over, match):
    """Bad training input fails when the config is read (before Ray starts), naming the key."""
    with pytest.raises(ConfigError, match=match):
        TrainConfig.from_dict({"env": "microworld", **over} if "env" not in over else over)


def test_non_finite_costs_and_weights_are_refused():
    from envs.costs import CostEvent, CostModel

    with pytest.raises(ValueError, match="cost weight of 'retrieval_calls' must be a finite number"):
        CostModel({"retrieval_calls": float("inf")})
    m = CostModel({"retrieval_calls": 0.1})
    m.costs["retrieval_calls"] = lambda e: float("nan")
    with pytest.raises(ValueError, match="cost 'retrieval_calls' returned nan"):
        m(CostEvent(retrieved=True))


def test_resume_helpers_trim_metrics_keep_final_and_fall_back(tmp_path):
    import json

    from train.run import last_metrics, restore_newest, trim_metrics

    p = tmp_path / "metrics.jsonl"
    p.write_text("".join(json.dumps({"iteration": i, "time": 0, "quality": i / 10}) + "\n" for i in range(1, 6))
                 + '{"iteration": 6, "qual')
    trim_metrics(p, 3)
    assert [json.loads(x)["iteration"] for x in p.read_text().splitlines()] == [1, 2, 3]
    assert last_metrics(p) == {"quality": 0.3} and last_metrics(tmp_path / "none.jsonl") == {}

    class Algo:
        def __init__(self):
            self.tried = []

        def restore_from_path(self, path):
            self.tried.append(path)
            if path.endswith("iter_000002"):
                raise EOFError("Ran out of input")

    ck = [tmp_path / "iter_000001", tmp_path / "iter_000002"]
    algo = Algo()
    assert restore_newest(algo, ck) == ck[0] and len(algo.tried) == 2
    algo.restore_from_path = lambda path: (_ for _ in ()).throw(EOFError("bad"))
    with pytest.raises(RuntimeError, match="no checkpoint .* could be restored .*iter_000002: EOFError"):
        restore_newest(algo, ck)
