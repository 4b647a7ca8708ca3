"""Supervised warm start: counterfactual labels equal brute force over the cached decision tree, the fit learns a
separable rule, and a training run starts REINFORCE from the fitted policy."""

from __future__ import annotations

import numpy as np
import pytest

from envs.core.config import ConfigError
from envs.env_config import EnvConfig
from train.warmstart import WarmStartOptions, counterfactual_labels, decision_gain, fit_policy

ENV = {"split": "train", "rsus_components": ["ent"], "signals": ["pulse", "output", "rsus", "content"],
       "query_modes": ["info_need", "step"]}


def _env(cfg: dict) -> EnvConfig:
    """The micro-world env of ``cfg`` (the labels take a typed EnvConfig, built once with its preset)."""
    return EnvConfig.from_preset("microworld", cfg)


def test_labels_equal_brute_force_on_the_cached_decision_tree(tmp_path):
    from envs.oracle import enumerate_leaves
    from envs.registration import make_env

    env_cfg = {**ENV, "cache_path": str(tmp_path / "c.sqlite")}
    lam = 0.1
    qs = [0, 1, 2, 3]
    data = counterfactual_labels(_env(env_cfg), qs, WarmStartOptions(enabled=True, batch_envs=4), lam,
                                 tmp_path / "ws", progress=False)
    env = make_env("microworld", {**env_cfg, "costs": {"retrieval_calls": lam}})
    for q in qs:
        leaves = {leaf.actions: leaf.quality - lam * leaf.calls for leaf in enumerate_leaves(env, q)}
        never = next(a for a in leaves if not any(a))
        rows = np.flatnonzero(data["question"] == q)
        assert len(rows) == len(never)  # one labelled decision per step of the closed-book chain
        for k, i in enumerate(rows, start=1):
            flip = next(a for a in leaves if a[:k] == (0,) * (k - 1) + (1,) and not any(a[k:]))
            assert data["delta"][i] == pytest.approx(leaves[flip] - leaves[never]), (q, k)
            assert data["y"][i] == float(leaves[flip] > leaves[never])
            assert data["w"][i] == pytest.approx(abs(leaves[flip] - leaves[never]))
        assert data["obs"]["step_embedding"][rows].shape[1] > 0
    env.close()


@pytest.mark.slow
def test_querygen_labels_equal_brute_force_per_query_mode(tmp_path):
    """With QueryGen actions every decision's retrieve branch is labelled once per mode: delta_modes[:, m] is the
    leaf that retrieves at k with mode m (closed book elsewhere) minus the closed-book leaf; ``delta`` its max;
    column 0 equals the labels of the same env without QueryGen (its default mode)."""
    from envs.oracle import enumerate_leaves_batched
    from envs.vector import BatchedRetrievalEnv

    # one retrieval per episode: the tree holds exactly the leaves the labels need (retrieve once at k with mode
    # m, closed book elsewhere), not every multi-retrieval branch (3^steps)
    env_cfg = {**ENV, "cache_path": str(tmp_path / "c.sqlite"), "querygen": True, "max_retrievals_per_question": 1}
    lam, qs = 0.1, [0, 1, 2, 3]
    data = counterfactual_labels(_env(env_cfg), qs, WarmStartOptions(enabled=True, batch_envs=4), lam,
                                 tmp_path / "ws", progress=False)
    assert data["modes"] == ["info_need", "step"] and data["delta_modes"].shape == (len(data["y"]), 2)
    venv = BatchedRetrievalEnv(4, {**env_cfg, "costs": {"retrieval_calls": lam}})
    trees = enumerate_leaves_batched(venv, qs, modes=[0, 1])
    venv.close()
    for q in qs:
        leaves = {leaf.actions: leaf.quality - lam * leaf.calls for leaf in trees[q]}
        never = next(a for a in leaves if all(x == (0, 0) for x in a))
        rows = np.flatnonzero(data["question"] == q)
        assert len(rows) == len(never)
        for k, i in enumerate(rows, start=1):
            for m in (0, 1):
                leaf = next(a for a in leaves if a[:k] == ((0, 0),) * (k - 1) + ((1, m),)
                            and all(x == (0, 0) for x in a[k:]))
                assert data["delta_modes"][i, m] == pytest.approx(leaves[leaf] - leaves[never]), (q, k, m)
            assert data["delta"][i] == pytest.approx(data["delta_modes"][i].max())
            assert data["y"][i] == float(data["delta"][i] > 0)
    plain = counterfactual_labels(_env({**env_cfg, "querygen": False}), qs, WarmStartOptions(enabled=True, batch_envs=4),
                                  lam, tmp_path / "ws_plain", progress=False)
    np.testing.assert_allclose(plain["delta"], data["delta_modes"][:, 0])
    assert plain["delta_modes"].shape[1] == 1


def test_labels_from_worker_processes_equal_the_one_process_labels(tmp_path):
    """`workers: 2` labels two contiguous shards in two processes, each from its own cold cache here: the merged
    rows (QueryGen labels, π₀'s means; observations up to float rounding) equal the one-process run's, in question
    order."""
    env_cfg = {**ENV, "querygen": True}
    qs, lam = [0, 1, 2, 3, 4], 0.1
    one = counterfactual_labels(_env({**env_cfg, "cache_path": str(tmp_path / "a.sqlite")}), qs,
                                WarmStartOptions(enabled=True, batch_envs=4), lam, tmp_path / "one", progress=False)
    two = counterfactual_labels(_env({**env_cfg, "cache_path": str(tmp_path / "b.sqlite")}), qs,
                                WarmStartOptions(enabled=True, batch_envs=4, workers=2), lam, tmp_path / "two",
                                progress=False)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["shard0", "shard1"]
    assert two["modes"] == one["modes"] and list(two["question"]) == list(one["question"])
    assert set(two["question"][:1]) == {0} and set(two["question"][-1:]) == {4}
    for key in ("y", "w", "delta", "delta_modes", "base_action", "base_reward"):
        np.testing.assert_array_equal(two[key], one[key], err_msg=key)
    for f in one["obs"]:  # equal up to rounding: a batched forward pass pads to its batch (as batch_envs does), and
        # the embeddings are stored in float16 (one unit in the last place)
        np.testing.assert_allclose(two["obs"][f], one["obs"][f], rtol=1e-3, atol=1e-3, err_msg=f)
    for key in ("behavior_reward", "behavior_accuracy", "behavior_calls"):
        assert two[key] == pytest.approx(one[key])
    with pytest.raises(ConfigError, match="workers"):
        WarmStartOptions.from_dict({"enabled": True, "workers": 0})
    # a question outside the split is an error on the driver, before a worker starts
    with pytest.raises(ConfigError, match=r"question indices \[1000000\] are outside the 'train' split"):
        counterfactual_labels(_env({**env_cfg, "cache_path": str(tmp_path / "c.sqlite")}), [0, 1_000_000],
                              WarmStartOptions(enabled=True, workers=2), lam, tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad").exists()


def test_threshold_behavior_flips_one_decision(tmp_path):
    opts = WarmStartOptions(enabled=True, behavior="threshold", signal="minprob", direction="below", threshold=0.9,
                            batch_envs=4)
    data = counterfactual_labels(_env({**ENV, "cache_path": str(tmp_path / "c.sqlite")}), [0, 1, 2, 3, 4, 5], opts, 0.1,
                                 tmp_path / "ws", progress=False)
    assert set(np.unique(data["base_action"])) <= {0, 1}
    # every label is the reward difference of two branches that differ in one decision: a multiple of λ apart from
    # the quality change (0/1 on the micro-world)
    frac = np.abs(data["delta"] * 10 - np.round(data["delta"] * 10))
    assert np.all(frac < 1e-6)
    with pytest.raises(ConfigError, match="signal 'nope' is not produced"):
        counterfactual_labels(_env(ENV), [0], WarmStartOptions(enabled=True, behavior="threshold", signal="nope",
                                                         threshold=0.5), 0.1, tmp_path / "x", progress=False)


def test_fit_learns_a_separable_rule_and_picks_the_epoch_on_validation():
    from policies.rl.net import PolicySpec

    rng = np.random.default_rng(0)
    n = 600
    x = rng.normal(size=(n, 3)).astype(np.float32)
    delta = np.where(x[:, 0] > 0, 0.9, -0.1)  # retrieving pays exactly when feature 0 is positive
    data = {"obs": {"output": x, "step_embedding": rng.normal(size=(n, 8)).astype(np.float32)},
            "y": (delta > 0).astype(np.float32), "w": np.abs(delta).astype(np.float32), "delta": delta,
            "base_action": np.zeros(n, dtype=np.int64), "base_reward": np.zeros(n, dtype=np.float32),
            "question": np.arange(n) // 3}
    spec = PolicySpec(fields={"output": 3, "step_embedding": 8}, arch="mlp", reduce={"step_embedding": 4})
    net, fit = fit_policy(data, spec, WarmStartOptions(enabled=True, epochs=15), seed=0)
    # the optimum gains 0.9 per positive decision: ~0.45 per decision, 3 decisions per question
    assert fit["val_gain_per_question"] > 1.0
    assert 1 <= fit["best_epoch"] <= 15 and not net.needs_reducer_fit
    p = np.ones(n)
    assert decision_gain(p, data, np.arange(n)) == pytest.approx(float(delta.sum()) / (n // 3))


def test_fit_learns_the_query_mode_where_it_matters():
    """QueryGen labels: the mode head learns which mode's retrieve branch pays (cost-sensitive cross-entropy),
    the retrieve head whether the best one does, and the validation gain counts the chosen mode's branch."""
    from policies.rl.net import PolicySpec

    rng = np.random.default_rng(1)
    n = 900
    x = rng.normal(size=(n, 3)).astype(np.float32)
    # retrieving pays 0.9 with mode 0 when x1 > 0 and with mode 1 otherwise; the wrong mode costs λ = 0.1
    dm = np.where((x[:, 1] > 0)[:, None], [[0.9, -0.1]], [[-0.1, 0.9]])
    dm[x[:, 0] < 0] = -0.1  # ... and only when x0 > 0
    delta = dm.max(1)
    data = {"obs": {"output": x}, "y": (delta > 0).astype(np.float32), "w": np.abs(delta).astype(np.float32),
            "delta": delta, "delta_modes": dm, "modes": ["a", "b"], "base_action": np.zeros(n, dtype=np.int64),
            "base_reward": np.zeros(n, dtype=np.float32), "question": np.arange(n) // 3}
    spec = PolicySpec(fields={"output": 3}, arch="mlp", n_modes=2)
    net, fit = fit_policy(data, spec, WarmStartOptions(enabled=True, epochs=20), seed=0)
    best = float(np.clip(delta, 0, None).sum()) / (n // 3)  # the gain of the right action with the right mode
    assert fit["val_gain_per_question"] > 0.8 * best
    mode_first = np.zeros(n, dtype=np.int64)  # always mode 0: right on half of the paying decisions only
    assert decision_gain(np.ones(n), data, np.arange(n), mode=mode_first) < 0.6 * best
    with pytest.raises(ValueError, match="query mode"):
        fit_policy(data, PolicySpec(fields={"output": 3}, arch="mlp"), WarmStartOptions(enabled=True, epochs=1))


def test_fit_in_float64_learns_the_same_rule_and_returns_a_float32_net():
    """``dtype: float64``: the same fit in float64 (network, input statistics, data), exported in float32; the
    process's default dtype comes back, also when the fit fails."""
    import torch

    from policies.rl.net import PolicySpec

    rng = np.random.default_rng(0)
    n = 600
    x = rng.normal(size=(n, 3)).astype(np.float32)
    delta = np.where(x[:, 0] > 0, 0.9, -0.1)
    data = {"obs": {"output": x}, "y": (delta > 0).astype(np.float32), "w": np.abs(delta).astype(np.float32),
            "delta": delta, "base_action": np.zeros(n, dtype=np.int64), "base_reward": np.zeros(n, dtype=np.float32),
            "question": np.arange(n) // 3}
    spec = PolicySpec(fields={"output": 3}, arch="mlp")
    net, fit = fit_policy(data, spec, WarmStartOptions(enabled=True, epochs=15, dtype="float64"), seed=0)
    assert fit["val_gain_per_question"] > 1.0 and torch.get_default_dtype() == torch.float32
    assert {t.dtype for t in net.state_dict().values() if t.is_floating_point()} == {torch.float32}
    assert data["obs"]["output"].dtype == np.float32  # the caller's arrays are not converted in place
    with pytest.raises(ValueError, match="query mode"):
        fit_policy({**data, "delta_modes": np.stack([delta, delta], 1)}, spec,
                   WarmStartOptions(enabled=True, epochs=1, dtype="float64"))
    assert torch.get_default_dtype() == torch.float32


def test_a_finished_warm_start_of_another_dtype_is_not_reused(tmp_path):
    import json

    from train.config import resume_changes
    from train.warmstart import finished_warmstart

    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "spec.json").write_text(json.dumps({"spec": {"n_modes": 1}}))
    (tmp_path / "summary.json").write_text(json.dumps({"behavior": {"kind": "counterfactual"}}))  # before dtype
    env = _env(ENV)
    assert finished_warmstart(tmp_path, env, WarmStartOptions(enabled=True)) == tmp_path / "policy"
    with pytest.raises(ConfigError, match="fitted in float32, this run asks for warmstart.dtype 'float64': delete"):
        finished_warmstart(tmp_path, env, WarmStartOptions(enabled=True, dtype="float64"))
    # a run recorded before the key resumes with its value, and not with another
    old = {"warmstart": {"enabled": True, "epochs": 40}}
    assert resume_changes(old, {"warmstart": {"enabled": True, "epochs": 40, "dtype": "float32"}}) == []
    assert resume_changes(old, {"warmstart": {"enabled": True, "epochs": 40, "dtype": "float64"}}) == [
        ("warmstart.dtype", "float32", "float64")]


def test_options_errors():
    with pytest.raises(ConfigError, match="needs 'threshold'"):
        WarmStartOptions.from_dict({"behavior": "threshold"})
    with pytest.raises(ConfigError, match="behavior must be never or threshold"):
        WarmStartOptions.from_dict({"behavior": "always"})
    with pytest.raises(ConfigError, match="lam must be a finite number"):
        WarmStartOptions.from_dict({"lam": float("nan")})
    with pytest.raises(ConfigError, match="unknown config key .question."):
        WarmStartOptions.from_dict({"question": 3})
    with pytest.raises(ConfigError, match="dtype must be float32 or float64, got 'float16'"):
        WarmStartOptions.from_dict({"dtype": "float16"})


@pytest.mark.slow
def test_training_run_starts_from_the_warm_start(tmp_path):
    """The whole step inside a training run: labels → fitted policy → REINFORCE starts from it (the first
    iteration's module carries the fitted content projection)."""
    import json

    import torch

    from policies.rl.export import load_policy
    from train.config import TrainConfig
    from train.run import train

    cfg = TrainConfig.from_dict({
        "out_dir": str(tmp_path / "run"), "iterations": 1, "num_env_runners": 0, "num_envs_per_env_runner": 4,
        "env": "microworld", "env_config": {**ENV, "max_questions": 16, "cache_path": str(tmp_path / "c.sqlite")},
        "algo": {"episodes_per_batch": 8, "lr": 1e-9}, "model": {"d_model": 16, "ff_dim": 32, "arch": "mlp"},
        "warmstart": {"enabled": True, "questions": 12, "epochs": 3, "batch_envs": 4},
        "curriculum": {"retrieval_calls": {"kind": "constant", "start": 0.1, "end": 0.1}}})
    train(cfg, show_progress=False)
    summary = json.loads((tmp_path / "run" / "warmstart" / "summary.json").read_text())
    assert summary["questions"] == 12 and summary["decisions"] >= 12
    ws, _ = load_policy(tmp_path / "run" / "warmstart" / "policy")
    out, _ = load_policy(tmp_path / "run" / "policy")
    torch.testing.assert_close(out.red_proj_step_embedding, ws.red_proj_step_embedding)
    # lr ~ 0: the trained policy is still the warm start
    torch.testing.assert_close(out.retrieve_head.weight, ws.retrieve_head.weight, atol=1e-5, rtol=0)


def test_mode_targets_break_ties_by_the_modes_mean_value_where_retrieval_pays():
    """A tie between modes goes to the mode with the higher mean value over the decisions where retrieving pays —
    not to the first listed (a generator tied with info_need at most decisions was learned as info_need)."""
    import numpy as np

    from train.warmstart import mode_targets

    dm = np.array([[0.9, 0.9], [0.9, 0.9], [0.0, 0.9], [-0.1, -0.1], [-0.1, 0.5]])
    y = np.array([1, 1, 1, 0, 1])
    target, weight = mode_targets(dm, y)
    assert target.tolist() == [1, 1, 1, 1, 1]  # mode 1's mean where it pays: 0.8 > 0.45
    assert weight.tolist() == pytest.approx([0.0, 0.0, 0.9, 0.0, 0.6])
    # the first mode ahead on average keeps the ties (the 2-mode main recipe's labels: unchanged)
    target, _ = mode_targets(dm[:, ::-1], y)
    assert target.tolist() == [0, 0, 0, 0, 0]
    # without y every decision counts; equal means keep the list order
    assert mode_targets(np.array([[0.5, 0.5], [0.5, 0.5]]))[0].tolist() == [0, 0]
