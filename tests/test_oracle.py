"""The exact oracle at any decision (envs.oracle.oracle_action_values) equals brute force over the whole decision
tree: every leaf enumerated without pruning, the best action at each prefix computed by hand."""

from __future__ import annotations

import pytest

from envs.env_config import EnvConfig

#: the shipped micro-world (real answers: some questions the closed-book chain gets right, some a retrieval fixes,
#: some a retrieval breaks), two query modes, at most 2 retrievals per episode: whole trees of 23-55 leaves
ENV = {"split": "train", "rsus_components": ["ent"], "signals": ["output"], "query_modes": ["info_need", "step"],
       "max_retrievals_per_question": 2}
QUESTIONS = [0, 1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """The same world with QueryGen actions and with plain 0/1 actions (its default mode: info_need), one cache."""
    from envs.vector import BatchedRetrievalEnv

    cache = str(tmp_path_factory.mktemp("oracle") / "c.sqlite")
    qg = BatchedRetrievalEnv(8, EnvConfig.from_preset("microworld", {**ENV, "querygen": True, "cache_path": cache}))
    plain = BatchedRetrievalEnv(8, EnvConfig.from_preset("microworld", {**ENV, "cache_path": cache}),
                                components=qg.envs[0].c)
    yield {"querygen": (qg, [0, 1]), "plain": (plain, None)}
    qg.close()
    plain.close()


def _all_leaves(env, q: int, retrieve: list) -> list:
    """Brute force, independent of the search under test: depth first, every action sequence replayed from reset
    with ``env.step`` (as :func:`envs.oracle.enumerate_leaves`), a retrieval branching once per action of
    ``retrieve``; every leaf, no pruning."""
    from envs.oracle import Leaf

    accept = (0, 0) if isinstance(retrieve[0], tuple) else 0
    out, stack = [], [()]
    while stack:
        actions = stack.pop()
        _, info = env.reset(options={"question_index": q})
        done = False
        for a in actions:
            _, _, te, tr, info = env.step(a)
            done = te or tr
        if done:
            out.append(Leaf(actions, float(info["quality"]), int(info["retrievals"]), {}))
            continue
        stack.append(actions + (accept,))
        if info["retrievals"] < env.config.max_retrievals_per_question and info["retrievals_this_step"] < \
                env.config.max_retrievals_per_step:
            stack += [actions + (r,) for r in retrieve]
    return out


def _flat(actions: tuple) -> tuple:
    return tuple(x for a in actions for x in (a if isinstance(a, tuple) else (a,)))


def _by_hand(leaves, prefix: tuple, lam: float):
    """Brute force at one decision: each next action's best reward below it, and the best action — the leaf of the
    highest reward below the prefix, ties to fewer calls, then to the lexicographically first actions."""
    below = [lf for lf in leaves if lf.actions[:len(prefix)] == prefix]
    reward = {lf.actions: lf.quality - lam * lf.calls for lf in below}
    values: dict = {}
    for lf in below:
        a = lf.actions[len(prefix)]
        values[a] = max(values.get(a, -float("inf")), reward[lf.actions])
    top = sorted(below, key=lambda lf: (-reward[lf.actions], lf.calls, _flat(lf.actions)))[0]
    return values, top.actions[len(prefix)]


@pytest.mark.parametrize("kind", ["querygen", "plain"])
def test_oracle_action_values_equal_brute_force_at_depths_0_1_2(venvs, kind):
    from envs.oracle import enumerate_leaves_batched, oracle_action_values

    venv, modes = venvs[kind]
    retrieve = [(1, m) for m in modes] if modes else [1]
    searched = enumerate_leaves_batched(venv, QUESTIONS, modes=modes)  # the batched search, no pruning (and a warm
    full = {q: _all_leaves(venv.envs[0], q, retrieve) for q in QUESTIONS}  # cache for brute force: every leaf)
    assert {q: sorted((lf.actions, lf.quality, lf.calls) for lf in v) for q, v in searched.items()} == \
        {q: sorted((lf.actions, lf.quality, lf.calls) for lf in v) for q, v in full.items()}
    states = sorted({(q, lf.actions[:d]) for q in QUESTIONS for lf in full[q] for d in (0, 1, 2)
                     if d < len(lf.actions)}, key=lambda s: (s[0], len(s[1]), _flat(s[1])))
    assert {len(p) for _, p in states} == {0, 1, 2}
    ties = retrieve_best = accept_best = 0
    for lam in (0.0, 0.1, 0.5):
        got = oracle_action_values(venv, states, lam, modes=modes)
        for (q, p), sv in zip(states, got):
            values, best = _by_hand(full[q], p, lam)
            assert (sv.question, sv.prefix) == (q, p)
            assert set(sv.actions) == set(values), (q, p)  # the caps close the retrieve actions where they bind
            assert dict(zip(sv.actions, sv.values)) == pytest.approx(values), (q, p, lam)
            assert sv.action == best, (q, p, lam)
            for a, leaf in zip(sv.actions, sv.leaves):  # each value is a real leaf below that action
                assert leaf.actions[:len(p) + 1] == p + (a,)
            top = sorted(values.values(), reverse=True)
            ties += len(top) > 1 and top[0] == top[1]
            retrieve_best += best != sv.actions[0]
            accept_best += best == sv.actions[0]
        # at the start of the episode the oracle's action is the cache oracle's (branch and bound) first action
        from envs.oracle import best_leaf

        pruned = enumerate_leaves_batched(venv, QUESTIONS, modes=modes, prune_lambda=lam)
        for (q, p), sv in zip(states, got):
            if p == ():
                assert sv.action == best_leaf(pruned[q], {"retrieval_calls": lam}).actions[0]
    assert ties > 0 and retrieve_best > 0 and accept_best > 0  # the tie rule and both kinds of answer exercised


def test_oracle_labels_refuse_a_finished_prefix_and_a_truncated_search(venvs):
    from envs.oracle import enumerate_leaves_batched, oracle_action_values

    venv, modes = venvs["querygen"]
    leaf = enumerate_leaves_batched(venv, [0], modes=modes)[0][0]
    with pytest.raises(ValueError, match="the episode is over after that prefix"):
        oracle_action_values(venv, [(0, leaf.actions)], 0.1, modes=modes)
    with pytest.raises(ValueError, match="raise max_leaves"):
        oracle_action_values(venv, [(0, ())], 0.0, modes=modes, max_leaves=2)
    with pytest.raises(ValueError, match="modes need an env with querygen actions"):
        oracle_action_values(venv, [(0, ())], 0.1, modes=None)
