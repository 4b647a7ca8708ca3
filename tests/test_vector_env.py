"""Batched stepping equals single-env stepping; the oracle enumerates every action sequence."""

import numpy as np
import pytest

from envs.vector import make_batched


@pytest.fixture()
def cfg(tiny_world):
    return {"artifact": str(tiny_world.path), "max_steps": 3, "max_step_tokens": 8, "rsus_components": ["ent"]}


def test_batched_env_matches_single_envs(cfg):
    from envs.retrieval_env import RetrievalTimingEnv

    vec = make_batched(3, cfg)
    obs, infos = vec.reset(seed=5)
    assert vec.observation_space.contains(obs)
    singles = [RetrievalTimingEnv(cfg) for _ in range(3)]
    sobs = [e.reset(seed=5 + i)[0] for i, e in enumerate(singles)]
    for i in range(3):
        for k in obs:
            np.testing.assert_allclose(obs[k][i], sobs[i][k], atol=1e-5)
    rng = np.random.default_rng(0)
    done = np.zeros(3, bool)
    for _ in range(4):
        acts = rng.integers(0, 2, size=3)
        obs, rew, te, tr, infos = vec.step(acts)
        for i, e in enumerate(singles):
            if done[i]:
                continue
            so, sr, ste, stt, _ = e.step(int(acts[i]))
            assert rew[i] == pytest.approx(sr)
            assert (te[i], tr[i]) == (ste, stt)
            for k in obs:
                np.testing.assert_allclose(obs[k][i], so[k], atol=1e-5)
            done[i] = ste or stt
        if done.all():
            break


def test_batched_observations_are_not_overwritten_by_later_steps(cfg):
    """Regression: RLlib keeps views of each returned batch; a reused buffer rewrote every stored obs."""
    vec = make_batched(2, cfg)
    first, _ = vec.reset(seed=1)
    kept = {k: v.copy() for k, v in first.items()}
    views = {k: v[0] for k, v in first.items()}  # what an episode stores: a per-env view
    for _ in range(2):
        vec.step(np.ones(2, dtype=np.int64))
    for k in kept:
        np.testing.assert_array_equal(first[k], kept[k])
        np.testing.assert_array_equal(views[k], kept[k][0])


def test_oracle_enumerates_leaves(cfg):
    from envs.oracle import best_leaf, enumerate_leaves
    from envs.retrieval_env import RetrievalTimingEnv

    env = RetrievalTimingEnv({**cfg, "max_retrievals_per_question": 2})
    leaves = enumerate_leaves(env, 0)
    assert len({lf.actions for lf in leaves}) == len(leaves) >= 2
    assert any(all(a == 0 for a in lf.actions) for lf in leaves)
    assert max(lf.calls for lf in leaves) <= 2
    # with a huge λ the oracle never retrieves; with λ = 0 it is at least as good as never
    assert best_leaf(leaves, {"retrieval_calls": 100.0}).calls == 0
    never = next(lf for lf in leaves if lf.calls == 0)
    assert best_leaf(leaves, {"retrieval_calls": 0.0}).quality >= never.quality


def test_batched_tree_search_finds_the_same_leaves(cfg):
    from envs.oracle import enumerate_leaves, enumerate_leaves_batched
    from envs.retrieval_env import RetrievalTimingEnv
    from envs.vector import BatchedRetrievalEnv

    c = {**cfg, "max_retrievals_per_question": 2}
    env = RetrievalTimingEnv(c)
    dfs = {q: sorted((lf.actions, lf.quality, lf.calls) for lf in enumerate_leaves(env, q)) for q in (0, 1, 2)}
    venv = BatchedRetrievalEnv(4, c, components=env.c)
    bfs = enumerate_leaves_batched(venv, [0, 1, 2])
    venv.close()
    assert {q: sorted((lf.actions, lf.quality, lf.calls) for lf in v) for q, v in bfs.items()} == dfs


@pytest.mark.parametrize("modes", [None, [0, 1]], ids=["plain", "querygen"])
def test_branch_and_bound_finds_the_best_leaf_of_the_full_search(cfg, modes):
    """Pruning at λ (searched level by level in retrieval calls) keeps the full search's best leaf, with plain
    actions and with each retrieval branching over two query modes."""
    from envs.oracle import best_leaf, enumerate_leaves_batched
    from envs.retrieval_env import RetrievalTimingEnv
    from envs.vector import BatchedRetrievalEnv

    c = {**cfg, "max_retrievals_per_question": 3}
    if modes is not None:
        c.update(querygen=True, query_modes=["info_need", "step"])
    env = RetrievalTimingEnv(c)
    venv = BatchedRetrievalEnv(4, c, components=env.c)
    qs = list(range(6))
    full = enumerate_leaves_batched(venv, qs, modes=modes)
    fewer = 0
    for lam in (0.0, 0.1, 0.4, 2.0):
        pruned = enumerate_leaves_batched(venv, qs, prune_lambda=lam, modes=modes)
        for q in qs:
            assert best_leaf(pruned[q], {"retrieval_calls": lam}) == best_leaf(full[q], {"retrieval_calls": lam})
            assert len({lf.actions for lf in pruned[q]}) == len(pruned[q]) <= len(full[q])  # no leaf twice
            fewer += len(pruned[q]) < len(full[q])
    venv.close()
    assert fewer > 0  # the bound cut something
