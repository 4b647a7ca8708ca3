"""Group baselines (RLOO, GRPO): the advantages on hand-made batches, the loss, the config's errors, and the
sampler — G rollouts of each scheduled question with their own action samples, on the env and through RLlib."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from envs.core.config import ConfigError
from train.config import TrainConfig
from train.groups import group_advantages, group_schedule

REPO = Path(__file__).resolve().parents[2]


def _loo(returns, groups):
    """The leave-one-out formula, written out: R_i minus the mean of the other rollouts of i's question."""
    out = []
    for i, (r, g) in enumerate(zip(returns, groups)):
        others = [returns[j] for j in range(len(returns)) if j != i and groups[j] == g]
        out.append(r - sum(others) / len(others))
    return out


# ------------------------------------------------------------------------------------------- the formulas
def test_rloo_equals_the_leave_one_out_formula_on_a_hand_made_batch():
    returns = [0.9, -0.1, 0.8, 1.0, 0.0, 0.0, 0.7, 0.4, 0.4, 0.4]
    groups = ["q1", "q1", "q1", "q1", "q2", "q2", "q3", "q3", "q3", "q3"]  # groups of 4, 2 and 4, interleaving ok
    got = group_advantages(returns, groups, "rloo")
    np.testing.assert_allclose(got, _loo(returns, groups), atol=1e-12)
    # by hand: q1's first rollout 0.9 − (−0.1 + 0.8 + 1.0) / 3 = 0.333…
    assert got[0] == pytest.approx(0.9 - 1.7 / 3)
    # RLOO is the group-mean advantage scaled by n / (n − 1)
    q1 = np.array(returns[:4])
    np.testing.assert_allclose(got[:4], (q1 - q1.mean()) * 4 / 3, atol=1e-12)


@pytest.mark.parametrize("kind", ["rloo", "grpo"])
def test_a_group_of_identical_rewards_gets_zero_advantage(kind):
    got = group_advantages([0.6, 0.6, 0.6, 0.6, 1.0, 0.0], ["a", "a", "a", "a", "b", "b"], kind)
    assert got[:4].tolist() == [0.0] * 4
    assert got[4] > 0 > got[5]


def test_grpo_is_the_group_z_score():
    r = [1.0, 0.0, 0.5, 0.9]
    got = group_advantages(r, ["a"] * 4, "grpo")
    np.testing.assert_allclose(got, (np.array(r) - np.mean(r)) / (np.std(r, ddof=1) + 1e-4), atol=1e-12)


def test_a_question_with_one_rollout_is_an_error_naming_it():
    with pytest.raises(ValueError, match="question 'q7' has 1 rollout.*group_size >= 2"):
        group_advantages([1.0, 0.0, 0.5], ["q1", "q1", "q7"], "rloo")
    with pytest.raises(ValueError, match="kind must be one of"):
        group_advantages([1.0, 0.0], ["a", "a"], "value")


def test_group_schedule_is_seeded_disjoint_across_runners_and_whole_groups():
    a = group_schedule(100, 12, 4, [0, 3], slot=0, n_slots=2)
    b = group_schedule(100, 12, 4, [0, 3], slot=1, n_slots=2)
    assert a == group_schedule(100, 12, 4, [0, 3], slot=0, n_slots=2)  # reproducible
    assert a != group_schedule(100, 12, 4, [0, 4], slot=0, n_slots=2)  # the next iteration draws anew
    for s in (a, b):
        assert list(Counter(s).values()) == [4, 4, 4] and s == sorted(s, key=s.index)  # each question 4× in a row
    assert not set(a) & set(b)
    with pytest.raises(ValueError, match="lower algo.episodes_per_batch"):
        group_schedule(5, 12, 2, 0, slot=0, n_slots=1)


def test_the_loss_uses_the_group_advantages_as_given():
    from train.reinforce import reinforce_loss

    logp = torch.tensor([-0.5, -1.0, -0.2])
    adv = torch.tensor([0.5, 0.5, -1.0])
    out = reinforce_loss(logp, torch.zeros(3), torch.tensor([9.0, 9.0, 9.0]), torch.zeros(3), baseline="rloo",
                         normalize_advantages=False, entropy_coeff=0.0, advantages=adv)
    assert float(out["policy_loss"]) == pytest.approx(-float((logp * adv).mean()))
    assert float(out["vf_loss"]) == 0.0  # the value head is not trained against a group baseline
    with pytest.raises(ValueError, match="needs the group advantages"):
        reinforce_loss(logp, torch.zeros(3), torch.ones(3), None, baseline="grpo", normalize_advantages=False,
                       entropy_coeff=0.0)


def test_the_connector_gives_every_step_its_episodes_group_advantage():
    """ComputeGroupAdvantages on hand-made RLlib episodes: each time step carries its episode's RLOO advantage,
    the episodes grouped by their question (the reset info's question_id), whatever their lengths."""
    pytest.importorskip("ray")
    from ray.rllib.core.columns import Columns
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from train.reinforce import ComputeGroupAdvantages

    def episode(qid, rewards):
        n = len(rewards)
        return SingleAgentEpisode(observations=[np.zeros(1, np.float32)] * (n + 1), actions=[0] * n,
                                  rewards=rewards, infos=[{"question_id": qid}] + [{}] * n, terminated=True,
                                  len_lookback_buffer=0)

    rewards = [[-0.1, 1.0], [0.0], [-0.1, -0.1, 0.0], [1.0], [0.0, 0.0]]
    qids = ["a", "a", "a", "b", "b"]
    eps = [episode(q, r) for q, r in zip(qids, rewards)]
    batch = ComputeGroupAdvantages(kind="rloo")(rl_module=None, episodes=eps, batch={})
    per_step = batch[Columns.ADVANTAGES]
    expected = _loo([sum(r) for r in rewards], qids)
    assert len(per_step) == len(eps)
    for e, want, r in zip(eps, expected, rewards):
        got = np.concatenate([np.atleast_1d(x) for x in per_step[(e.id_,)]])
        np.testing.assert_allclose(got, [want] * len(r), atol=1e-6)


# ------------------------------------------------------------------------------------------- the config
@pytest.mark.parametrize("over, match", [
    ({"algo": {"baseline": "rloo"}}, "baseline 'rloo' compares each rollout .* set algo.group_size >= 2"),
    ({"algo": {"baseline": "grpo", "group_size": 1}}, "baseline 'grpo' .* set algo.group_size >= 2"),
    ({"algo": {"baseline": "rloo", "group_size": 3, "episodes_per_batch": 256}, "num_env_runners": 2},
     r"episodes_per_batch \(256\) must be a multiple of algo.group_size × num_env_runners \(3 × 2 = 6\).*"
     "episodes_per_batch: 252"),
    ({"algo": {"group_size": 0}}, "group_size"),
    ({"algo": {"baseline": "loo"}}, "baseline must be one of"),
])
def test_group_baseline_config_errors_say_the_fix(over, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig.from_dict(over)


def test_group_options_load_and_reach_the_algorithm_config():
    from train.reinforce import ReinforceConfig
    from train.run import build_algo_config

    cfg = TrainConfig.from_yaml(REPO / "configs" / "experiments" / "microworld" / "train_microworld_rloo.yaml")
    main = TrainConfig.from_yaml(REPO / "configs" / "experiments" / "microworld" / "train_microworld_querygen_2modes.yaml")
    assert (cfg.algo.baseline, cfg.algo.group_size) == ("rloo", 4)
    # the main recipe, but for the baseline (and where the run writes)
    diff = {k for k, v in cfg.to_dict().items() if main.to_dict()[k] != v}
    assert diff == {"name", "out_dir", "algo"}
    assert {k for k, v in cfg.algo.to_dict().items() if main.algo.to_dict()[k] != v} == {"baseline", "group_size"}
    algo_cfg = build_algo_config(cfg)
    assert (algo_cfg.baseline, algo_cfg.group_size) == ("rloo", 4)
    with pytest.raises(ValueError, match="set group_size >= 2"):
        ReinforceConfig().training(baseline="rloo").validate()
    with pytest.raises(ValueError, match="multiple of group_size × num_env_runners"):
        ReinforceConfig().training(baseline="rloo", group_size=3, num_episodes_per_train_batch=64).validate()


# ------------------------------------------------------------------------------------------- the sampler
@pytest.fixture()
def env_cfg(tiny_world, tmp_path):
    return {"artifact": str(tiny_world.path), "max_steps": 3, "max_step_tokens": 8, "rsus_components": ["ent"],
            "cache_path": str(tmp_path / "cache.sqlite")}


def _play(vec, rng, max_steps=60):
    """Random actions until every copy is parked; the finished episodes' (question id, actions)."""
    def parked(infos, i):
        return bool(infos.get("_parked", np.zeros(vec.num_envs, bool))[i])

    _, infos = vec.reset(seed=3)
    current = {i: (infos["question_id"][i], []) for i in range(vec.num_envs) if not parked(infos, i)}
    done = []
    for _ in range(max_steps):
        acts = rng.integers(0, 2, size=vec.num_envs)
        _, rew, te, tr, infos = vec.step(acts)
        for i in range(vec.num_envs):
            if i in current:  # stepped: its action counted
                current[i][1].append(int(acts[i]))
                if te[i] or tr[i]:
                    done.append(current.pop(i))
            elif parked(infos, i):
                assert not te[i] and not tr[i] and rew[i] == 0.0
            else:  # an autoreset: the next scheduled question
                current[i] = (infos["question_id"][i], [])
        if vec._parked.all():
            break
    return done


def test_the_env_schedule_gives_each_question_its_rollouts_then_parks(env_cfg):
    from envs.retrieval_env import EnvUsageError
    from envs.vector import make_batched

    vec = make_batched(4, env_cfg)
    n = vec.num_questions
    with pytest.raises(EnvUsageError, match=f"out of range \\[0, {n}\\)"):
        vec.schedule_questions([0, n])
    vec.schedule_questions([2, 2, 2, 5, 5, 5])  # 6 episodes on 4 copies: autoresets take the rest, then park
    done = _play(vec, np.random.default_rng(0))
    qid = {i: vec.envs[0].c.question_id(vec.envs[0].c.questions[i]) for i in (2, 5)}
    assert Counter(q for q, _ in done) == {qid[2]: 3, qid[5]: 3}
    assert vec._parked.all()
    obs, infos = vec.reset(seed=4)  # no schedule armed: the round is over, questions drawn at random again
    assert not vec._parked.any() and "parked" not in infos


def test_rollouts_at_the_same_prefix_make_their_record_once(env_cfg):
    """A question's rollouts side by side: copies at the same (question, prefix) in one batched call share one
    generated record (the others take it as a cache hit) and see the same observation; once their actions differ
    they part."""
    from envs.vector import make_batched

    vec = make_batched(3, env_cfg)
    made = vec.envs[0].c.phase_seconds
    vec.schedule_questions([4, 4, 4])
    obs, _ = vec.reset(seed=0)
    assert made["start"][1] == 1  # one start record for three copies
    obs, *_ = vec.step(np.array([1, 1, 0]))  # two retrieve at step 1, one accepts
    assert made["retrieve"][1] == 1
    prefixes = [e.ep.prefix for e in vec.envs]
    assert prefixes[0] == prefixes[1] != prefixes[2]
    assert made.get("next", [0, 0])[1] <= 2  # at most one next step per distinct prefix
    for k in obs:
        np.testing.assert_array_equal(obs[k][0], obs[k][1])
    single = make_batched(1, {**env_cfg, "cache_path": None})  # the same episode alone, nothing shared or cached
    single.schedule_questions([4])
    single.reset(seed=0)
    alone, *_ = single.step(np.array([1]))
    for k in obs:
        np.testing.assert_allclose(obs[k][1], alone[k][0], atol=1e-6)


def test_rllib_samples_g_rollouts_per_question_with_their_own_actions(tiny_world, tmp_path):
    """Through RLlib: a batch of 8 episodes = 2 questions × 4 rollouts, the rollouts' action sequences differ
    (independent sampling), the same iteration resampled gives the same episodes, and a training step runs."""
    ray = pytest.importorskip("ray")
    from train.run import build_algo_config

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}})
    try:
        cfg = TrainConfig.from_dict({
            "out_dir": str(tmp_path / "run"), "num_env_runners": 0, "num_envs_per_env_runner": 3,
            "env_config": {"artifact": str(tiny_world.path), "max_steps": 3, "max_step_tokens": 8,
                           "rsus_components": ["ent"], "signals": ["output", "rsus"],
                           "cache_path": str(tmp_path / "cache.sqlite")},
            "algo": {"baseline": "rloo", "group_size": 4, "episodes_per_batch": 8},
            "model": {"d_model": 16, "ff_dim": 32, "explore_floor": 0.3}})
        algo = build_algo_config(cfg).build_algo()
        try:
            def sample():
                algo._prepare_runners()
                eps, _ = algo._sample_episodes()
                return [(e.get_infos()[0]["question_id"], tuple(np.asarray(e.get_actions()).tolist())) for e in eps]

            first = sample()
            assert len(first) == 8 and sorted(Counter(q for q, _ in first).values()) == [4, 4]
            by_q: dict = {}
            for q, acts in first:
                by_q.setdefault(q, set()).add(acts)
            assert any(len(v) > 1 for v in by_q.values())  # the rollouts of a question sample their own actions
            assert sorted(sample()) == sorted(first)  # seeded by (seed, iteration): the same episodes again
            res = algo.train()
            assert np.isfinite(res["learners"]["default_policy"]["policy_loss"])
        finally:
            algo.stop()
    finally:
        ray.shutdown()
