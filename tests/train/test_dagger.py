"""DAgger warm start (train.dagger): the labels are the exact oracle's at the states the rolled-out policy visits,
rounds aggregate new states only, a rerun resumes from the round files, and a run with ``iterations: 0`` exports
the warm start without REINFORCE."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envs.core.config import ConfigError
from envs.env_config import EnvConfig
from train.warmstart import WarmStartOptions

#: the shipped micro-world, two query modes, at most 2 retrievals per episode (small trees)
ENV = {"split": "train", "rsus_components": ["ent"], "signals": ["output"], "query_modes": ["info_need", "step"],
       "querygen": True, "max_retrievals_per_question": 2}
MODEL = {"arch": "mlp", "d_model": 16, "ff_dim": 32, "query_modes": ["info_need", "step"], "content_dim": 0}


def _cfg(tmp_path, **over) -> EnvConfig:
    return EnvConfig.from_preset("microworld", {**ENV, "cache_path": str(tmp_path / "c.sqlite"),
                                                "costs": {"retrieval_calls": 0.1}, **over})


def _opts(**over) -> WarmStartOptions:
    return WarmStartOptions.from_dict({"enabled": True, "kind": "dagger", "questions": 6, "epochs": 3,
                                       "batch_envs": 8, **over})


def _prefix(key: str) -> tuple:
    flat = [int(x) for x in key.split("|")[1].split(",") if x]
    return tuple(zip(flat[::2], flat[1::2]))


def test_round_labels_are_the_oracle_at_the_rolled_out_states(tmp_path):
    """Round 0 rolls out π₀ = never: its states are the closed-book prefixes; each label is the oracle's values
    there (delta_modes = Q*(retrieve with mode m) − Q*(accept), target = the oracle's action), each observation the
    one the policy saw at that decision."""
    from envs.oracle import oracle_action_values
    from envs.vector import BatchedRetrievalEnv
    from policies.triggers import NeverTrigger
    from train.dagger import dagger_round, label_arrays
    from train.evaluate import evaluate_policy

    cfg, qs = _cfg(tmp_path), [0, 1, 2, 3, 4, 5]
    out = dagger_round(cfg, qs, _opts(), None, set(), 0.1, progress=False)
    data = label_arrays(out["rows"], True, 2)
    never = evaluate_policy(NeverTrigger(), cfg.replace(querygen=False), qs, return_episodes=True)["episodes"]
    assert out["visited"] == len(data["question"]) == sum(e["steps"] for e in never)
    assert out["reward"] == pytest.approx(np.mean([e["reward"] for e in never]))
    states = [(int(q), _prefix(k)) for q, k in zip(data["question"], data["state"])]
    assert all(p == ((0, 0),) * len(p) for _, p in states)
    assert sorted(len(p) for q, p in states if q == 0) == list(range(never[0]["steps"]))
    venv = BatchedRetrievalEnv(8, cfg)
    want = oracle_action_values(venv, states, 0.1, modes=[0, 1])
    venv.close()
    for i, sv in enumerate(want):
        assert sv.actions == ((0, 0), (1, 0), (1, 1))
        np.testing.assert_allclose(data["delta_modes"][i], np.array(sv.values[1:]) - sv.values[0])
        assert data["y"][i] == sv.action[0] and data["oracle_mode"][i] == sv.action[1]
        assert data["w"][i] == pytest.approx(abs(max(sv.values[1:]) - sv.values[0]))
    assert 0 < data["y"].sum() < len(data["y"])  # both labels occur
    # the observation of each labelled decision is the env's at that prefix
    from envs.oracle import replay

    venv = BatchedRetrievalEnv(1, cfg)
    replay(venv.envs, [states[-1]])
    obs = venv.envs[0]._obs()
    venv.close()
    for f, v in obs.items():
        np.testing.assert_allclose(data["obs"][f][-1], v, atol=1e-5, err_msg=f)


def test_rounds_aggregate_new_states_and_resume_from_their_files(tmp_path, monkeypatch):
    import train.dagger as dagger
    from train.warmstart import run_warmstart

    cfg, out = _cfg(tmp_path), tmp_path / "ws"
    path = run_warmstart(cfg, _opts(rounds=2), out, MODEL, lam=0.1, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    assert path == out / "policy" and summary["kind"] == "dagger" and len(summary["rounds"]) == 2
    r0, r1 = summary["rounds"]
    assert r0["policy"] == "behavior: never" and r1["policy"] == str(out / "dagger" / "round_0" / "policy")
    assert r1["decisions"] == r0["new_decisions"] + r1["new_decisions"]  # the fit reads every round's labels
    s0, s1 = (set(dagger.load_labels(out / "dagger" / f"round_{r}" / "labels.npz")["state"]) for r in (0, 1))
    assert not s0 & s1  # a state labelled once
    assert r1["visited"] >= r1["new_decisions"] + r1["no_choice"]
    assert set(summary["final_rollout"]) >= {"reward", "accuracy", "calls"}
    spec = json.loads((out / "policy" / "spec.json").read_text())
    assert spec["warmstart"]["kind"] == "dagger" and spec["spec"]["n_modes"] == 2

    # a rerun reuses the finished warm start; with its summary gone, the round files (no labelling again)
    (out / "summary.json").unlink()
    real = dagger.dagger_round

    def no_labels(*a, **kw):
        assert not a[-1] if len(a) > 8 else not kw.get("label", True), "a round was labelled again"
        return real(*a, **kw)

    monkeypatch.setattr(dagger, "dagger_round", no_labels)
    run_warmstart(cfg, _opts(rounds=2), out, MODEL, lam=0.1, progress=False)
    assert json.loads((out / "summary.json").read_text())["rounds"] == summary["rounds"]
    # another λ cannot reuse the round labels; another kind cannot reuse the finished warm start
    (out / "summary.json").unlink()
    with pytest.raises(ConfigError, match=r"was labelled with other settings \(lambda: 0.1 -> 0.3\)"):
        run_warmstart(cfg, _opts(rounds=2), out, MODEL, lam=0.3, progress=False)
    run_warmstart(cfg, _opts(rounds=2), out, MODEL, lam=0.1, progress=False)
    with pytest.raises(ConfigError, match="holds a finished 'dagger' warm start"):
        run_warmstart(cfg, WarmStartOptions(enabled=True, questions=6), out, MODEL, lam=0.1, progress=False)


@pytest.mark.slow
def test_labels_from_worker_processes_equal_the_one_process_labels(tmp_path):
    from train.dagger import label_arrays, run_round

    opts = _opts(questions=5)
    one = run_round(_cfg(tmp_path), list(range(5)), opts, None, set(), 0.1, None, progress=False)
    two = run_round(_cfg(tmp_path, cache_path=str(tmp_path / "b.sqlite")), list(range(5)),
                    WarmStartOptions.from_dict({**opts.to_dict(), "workers": 2}), None, set(), 0.1, None,
                    progress=False)
    a, b = label_arrays(one["rows"], True, 2), label_arrays(two["rows"], True, 2)
    for key in ("question", "state", "delta_modes", "y", "oracle_mode", "base_reward"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert one["reward"] == pytest.approx(two["reward"]) and one["visited"] == two["visited"]


def test_training_run_with_zero_iterations_exports_the_dagger_warm_start(tmp_path, capsys):
    """``iterations: 0``: the warm start is the run's policy (no REINFORCE, no Ray) — through ``python -m train``'s
    own entry point, whose final line reads the run's summary (it once failed there after a finished warm start)."""
    import json

    import torch
    import yaml

    from policies.rl.export import load_policy
    from train.cli import DONE_KEYS, main
    from train.config import TrainConfig

    cfg = TrainConfig.from_dict({
        "out_dir": str(tmp_path / "run"), "iterations": 0, "env": "microworld",
        "env_config": {**ENV, "max_questions": 16, "cache_path": str(tmp_path / "c.sqlite")},
        "model": {"d_model": 16, "ff_dim": 32, "arch": "mlp", "content_dim": 0},
        "warmstart": {"enabled": True, "kind": "dagger", "rounds": 1, "questions": 4, "epochs": 2, "batch_envs": 4},
        "curriculum": {"retrieval_calls": {"kind": "constant", "start": 0.1, "end": 0.1}}})
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    assert main(["--config", str(tmp_path / "train.yaml"), "--no-progress"]) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(DONE_KEYS) <= summary.keys()
    assert summary["iteration"] == 0 and not (tmp_path / "run" / "checkpoints").exists()
    ws, _ = load_policy(tmp_path / "run" / "warmstart" / "policy")
    for name in ("policy", "policy_trigger"):
        net, meta = load_policy(tmp_path / "run" / name)
        torch.testing.assert_close(net.retrieve_head.weight, ws.retrieve_head.weight)
    assert (tmp_path / "run" / "policy_querygen" / "spec.json").is_file()


def test_option_errors_say_the_fix():
    from train.config import TrainConfig

    with pytest.raises(ConfigError, match="kind must be one of counterfactual, dagger, got 'daggger'"):
        WarmStartOptions.from_dict({"kind": "daggger"})
    with pytest.raises(ConfigError, match="key 'rounds' must be >= 1"):
        WarmStartOptions.from_dict({"kind": "dagger", "rounds": 0})
    with pytest.raises(ConfigError, match="iterations 0 trains nothing.*set warmstart.enabled: true"):
        TrainConfig.from_dict({"iterations": 0})
    with pytest.raises(ConfigError, match="key 'iterations' must be >= 0, got -1"):
        TrainConfig.from_dict({"iterations": -1})
