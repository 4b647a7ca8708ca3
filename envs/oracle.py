"""The cache oracle: for each question, the best action sequence of any timing policy (docs/design.md §5).

Greedy decoding makes every episode a deterministic function of its action sequence, so the oracle
enumerates the decision tree by depth-first search over the env (replays are trajectory-cache hits).
The result per question is every leaf's ``(quality, retrieval calls, raw costs)``; the best sequence at
any cost weights λ is then a max over leaves, with no more generation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Leaf:
    """One complete action sequence of a question and what it yields."""

    actions: tuple[int, ...]
    quality: float
    calls: int
    costs: dict


def enumerate_leaves(env, question_index: int, max_leaves: int = 4096) -> list[Leaf]:
    """Every distinct outcome of a question (binary retrieve decisions; QueryGen's default mode)."""
    u = env.unwrapped
    leaves: list[Leaf] = []

    def replay(actions: tuple[int, ...]):
        obs, info = u.reset(options={"question_index": question_index})
        done, totals = False, {}
        out = (False, info)
        for a in actions:
            obs, r, te, tr, info = u.step(a)
            for k, v in info["costs"].items():
                totals[k] = totals.get(k, 0.0) + v
            done = te or tr
            out = (done, info)
        return out, totals

    stack: list[tuple[int, ...]] = [()]
    while stack:
        actions = stack.pop()
        (done, info), totals = replay(actions)
        if done:
            leaves.append(Leaf(actions, float(info["quality"]), int(info["retrievals"]), totals))
            if len(leaves) >= max_leaves:
                log.warning("question %d: stopped after %d leaves", question_index, max_leaves)
                break
            continue
        can_retrieve = (info["retrievals"] < u.config.max_retrievals_per_question
                        and info["retrievals_this_step"] < u.config.max_retrievals_per_step)
        stack.append(actions + (0,))
        if can_retrieve:
            stack.append(actions + (1,))
    return leaves


def enumerate_leaves_batched(venv, question_indices: list[int], max_leaves: int = 4096, progress=None,
                             modes: list[int] | None = None, prune_lambda: float | None = None,
                             quality_max: float = 1.0) -> dict[int, list[Leaf]]:
    """:func:`enumerate_leaves` for many questions at once, breadth first: each round replays every open action
    prefix (trajectory-cache hits) and generates the records one decision deeper for all of them in batched
    reasoner calls (``venv``: an :class:`envs.vector.BatchedRetrievalEnv`). Same leaves as the depth-first
    search, in another order (:func:`best_leaf` does not depend on it). The whole tree of each question is
    :func:`search_subtrees` from the empty prefix.

    ``modes``: with an env of QueryGen actions (``querygen: true``), the query-mode indices a retrieval may use;
    actions are then ``(retrieve, mode)`` pairs and each retrieval branches once per mode (the oracle over when
    *and* how to ask). ``None``: plain ``0/1`` actions (the env's default mode).

    ``prune_lambda``: branch and bound for the best leaf at that λ (:func:`best_leaf` with weights
    ``{"retrieval_calls": λ}``). The never-retrieve leaf of each question is found first; from then on a prefix
    none of whose leaves can reach the best reward found so far for its question (``quality_max − λ·calls`` below
    it: calls only grow along a branch) is not expanded. The search then goes level by level in retrieval calls:
    every leaf with c calls is finished before any prefix with c + 1 calls is expanded, so the bound is as tight as
    the tree allows when it is checked (a question that one retrieval fixes never opens a two-call branch; without
    the levels those branches are expanded before the one-call leaves finish, and with several query modes the
    tree is 5-way at each step). The best leaf is the one the full search finds; the lists hold fewer leaves. On
    the micro-world this skips every retrieval branch of a question the closed-book chain already answers right."""
    qs = list(dict.fromkeys(int(q) for q in question_indices))
    trees = search_subtrees(venv, [(q, ()) for q in qs], max_leaves=max_leaves, progress=progress, modes=modes,
                            prune_lambda=prune_lambda, quality_max=quality_max)
    return dict(zip(qs, trees))


def tree_actions(cfg, modes: list[int] | None) -> tuple[Any, list[Any]]:
    """``(accept, [retrieve actions])`` of an env config: ``0`` and ``[1]``, or with QueryGen actions ``(0, 0)`` and
    ``[(1, m) for m in modes]`` (an error unless ``modes`` is given exactly when the env has QueryGen actions)."""
    if (modes is not None) != bool(cfg.querygen):
        raise ValueError("oracle search: modes need an env with querygen actions, and such an env modes")
    if modes is None:
        return 0, [1]
    return (0, 0), [(1, int(m)) for m in modes]


def replay(envs, items: list[tuple[int, tuple]]) -> list[tuple[bool, dict, dict]]:
    """Replay each ``(question, action prefix)`` in its own env copy (``len(items) <= len(envs)``; trajectory-cache
    hits, else one batched generation per decision): ``(episode over?, the last info, the summed raw costs)``."""
    from envs.retrieval_env import reset_batch, step_batch

    es = envs[:len(items)]
    infos = [i for _, i in reset_batch(es, options=[{"question_index": q} for q, _ in items])]
    totals: list[dict] = [{} for _ in items]
    done = [False] * len(items)
    for t in range(max((len(a) for _, a in items), default=0)):
        idx = [j for j, (_, a) in enumerate(items) if t < len(a)]
        for j, (_, _, te, tr, info) in zip(idx, step_batch([es[j] for j in idx], [items[j][1][t] for j in idx])):
            infos[j], done[j] = info, bool(te or tr)
            for k, v in info["costs"].items():
                totals[j][k] = totals[j].get(k, 0.0) + v
    return [(done[j], infos[j], totals[j]) for j in range(len(items))]


def can_retrieve(cfg, info: dict) -> bool:
    """Whether the env would carry out a retrieval at the decision ``info`` describes (no cap reached)."""
    return (info["retrievals"] < cfg.max_retrievals_per_question
            and info["retrievals_this_step"] < cfg.max_retrievals_per_step)


def search_subtrees(venv, roots: list[tuple[int, tuple]], max_leaves: int = 4096, progress=None,
                    modes: list[int] | None = None, prune_lambda: float | None = None,
                    quality_max: float = 1.0) -> list[list[Leaf]]:
    """The leaves below each root ``(question, action prefix)``: the subtree of the decision tree that starts with
    that prefix, searched breadth first for all roots at once (see :func:`enumerate_leaves_batched`, which is this
    from the empty prefix). A leaf's ``actions`` include its root's prefix, its calls and costs the prefix's.

    Roots may nest (a prefix of one root is another root, as along one episode's decisions): every action prefix is
    replayed once, and each leaf is recorded for every root above it. With ``prune_lambda`` each root has its own
    bound (the best reward found so far *below that root*): a prefix is expanded while one root above it can still
    reach its best, so each root's best leaf (:func:`best_leaf`) is the one its full subtree holds; the closed-book
    continuation of every root comes first, then the search goes level by level in retrieval calls. A root that
    reaches ``max_leaves`` leaves stops growing (logged; its list is then not its whole subtree)."""
    envs = venv.envs
    cfg = envs[0].config
    accept, retrieve = tree_actions(cfg, modes)
    roots = [(int(q), tuple(p)) for q, p in roots]
    by_q: dict[int, list[int]] = {}
    for i, (q, _) in enumerate(roots):
        by_q.setdefault(q, []).append(i)
    leaves: list[list[Leaf]] = [[] for _ in roots]
    best = [-float("inf")] * len(roots)  # best leaf reward so far below each root (pruning only)
    recorded: set[tuple[int, tuple]] = set()

    def owners(q: int, a: tuple) -> list[int]:
        return [i for i in by_q[q] if a[:len(roots[i][1])] == roots[i][1]]

    def worth(q: int, a: tuple, calls: int) -> bool:
        return any(len(leaves[i]) < max_leaves and (prune_lambda is None
                                                     or quality_max - prune_lambda * calls >= best[i] - 1e-12)
                   for i in owners(q, a))

    def record(q: int, a: tuple, info: dict, totals: dict) -> None:
        if (q, a) in recorded:  # found again (the closed-book continuations are searched first): no leaf twice
            return
        recorded.add((q, a))
        leaf = Leaf(a, float(info["quality"]), int(info["retrievals"]), totals)
        for i in owners(q, a):
            leaves[i].append(leaf)
            if prune_lambda is not None:
                best[i] = max(best[i], leaf.quality - prune_lambda * leaf.calls)
            if len(leaves[i]) == max_leaves:
                log.warning("question %d, prefix %s: stopped after %d leaves", q, roots[i][1], max_leaves)
        if progress is not None:
            progress.update(1)

    def search(only_accept: bool) -> None:
        seen: set[tuple[int, tuple]] = set()
        frontier = [r for r in dict.fromkeys(roots)]
        calls_level = 0  # with pruning: the prefixes open now have this many calls; one more waits in `deferred`
        deferred: list[tuple[int, tuple, int]] = []  # (question, prefix, its calls)
        while frontier or deferred:
            if not frontier:  # every leaf with calls_level calls is done: the bound is final for this level
                calls_level += 1
                frontier = [(q, a) for q, a, c in deferred if worth(q, a, c)]
                deferred = []
                continue
            frontier = [x for x in frontier if x not in seen]
            seen.update(frontier)
            nxt: list[tuple[int, tuple]] = []
            for start in range(0, len(frontier), len(envs)):
                chunk = frontier[start:start + len(envs)]
                for (q, a), (done, info, totals) in zip(chunk, replay(envs, chunk)):
                    if done:
                        record(q, a, info, totals)
                        continue
                    calls = int(info["retrievals"])
                    if worth(q, a, calls):
                        nxt.append((q, a + (accept,)))
                    if not only_accept and can_retrieve(cfg, info) and worth(q, a, calls + 1):
                        if prune_lambda is None:
                            nxt += [(q, a + (r,)) for r in retrieve]
                        else:
                            deferred += [(q, a + (r,), calls + 1) for r in retrieve]
            if progress is not None:
                progress.set_postfix_str(f"{len(nxt)} open prefixes"
                                         + (f", {calls_level} calls" if prune_lambda is not None else ""))
            frontier = nxt

    if prune_lambda is not None:  # the closed-book continuations first: their rewards bound the subtrees
        search(only_accept=True)
    search(only_accept=False)
    return leaves


def best_leaf(leaves: list[Leaf], weights: dict[str, float]) -> Leaf:
    """The leaf with the highest ``quality − Σ λ·cost`` (ties: fewer calls, then lexicographic)."""
    def score(leaf: Leaf):
        pen = sum(weights.get(k, 0.0) * v for k, v in leaf.costs.items())
        flat = tuple(-x for a in leaf.actions for x in (a if isinstance(a, tuple) else (a,)))
        return (leaf.quality - pen, -leaf.calls, flat)
    return max(leaves, key=score)


def leaf_reward(leaf: Leaf, weights: dict[str, float]) -> float:
    """``quality − Σ λ·cost`` of a leaf (what :func:`best_leaf` maximises)."""
    return leaf.quality - sum(weights.get(k, 0.0) * v for k, v in leaf.costs.items())


@dataclass(frozen=True)
class StateValues:
    """The oracle at one decision: the best reachable leaf below each action open there.

    ``actions[0]`` is accept; the others retrieve (one per query mode searched), absent where the env's retrieval
    caps would turn a retrieval into an accept. ``values[i]`` is the reward of ``leaves[i]``, the best leaf below
    ``prefix + (actions[i],)``; ``action`` is the oracle's choice: the next action of the best of those leaves under
    :func:`best_leaf`'s order (highest reward, then fewer calls, then the lexicographically first actions — accept
    before retrieve, the lower mode first), the same choice the cache oracle makes from the start of the episode."""

    question: int
    prefix: tuple
    actions: tuple
    values: tuple[float, ...]
    leaves: tuple[Leaf, ...]
    action: Any


def oracle_action_values(venv, states: list[tuple[int, tuple]], lam: float, modes: list[int] | None = None,
                         max_leaves: int = 4096, progress=None, quality_max: float = 1.0) -> list[StateValues]:
    """The exact oracle's action values at any decisions: for each state ``(question, action prefix)`` (the actions
    taken so far; ``(retrieve, mode)`` pairs with QueryGen actions, ``modes`` as in :func:`enumerate_leaves_batched`),
    the best leaf reward ``quality − λ·calls`` reachable below each open action, and the best action.

    One :func:`search_subtrees` over the children of every state (branch and bound at ``lam``, per child), batched
    across states and questions; the states of one episode share their replays. A state whose prefix already ended
    the episode is an error, and so is a child whose search stopped at ``max_leaves`` (its value would not be
    exact: raise ``max_leaves``)."""
    envs = venv.envs
    cfg = envs[0].config
    accept, retrieve = tree_actions(cfg, modes)
    states = [(int(q), tuple(p)) for q, p in states]
    uniq = list(dict.fromkeys(states))
    opened: dict[tuple[int, tuple], tuple] = {}
    for start in range(0, len(uniq), len(envs)):
        chunk = uniq[start:start + len(envs)]
        for (q, p), (done, info, _) in zip(chunk, replay(envs, chunk)):
            if done:
                raise ValueError(f"oracle labels: question {q}, prefix {p}: the episode is over after that prefix "
                                 "(no decision to label)")
            opened[(q, p)] = (accept, *retrieve) if can_retrieve(cfg, info) else (accept,)
    children = list(dict.fromkeys((q, p + (a,)) for (q, p), acts in opened.items() for a in acts))
    trees = dict(zip(children, search_subtrees(venv, children, max_leaves=max_leaves, progress=progress,
                                               modes=modes, prune_lambda=lam, quality_max=quality_max)))
    full = [c for c, t in trees.items() if len(t) >= max_leaves]
    if full:
        raise ValueError(f"oracle labels: the search below {len(full)} action prefixes (first: question "
                         f"{full[0][0]}, {full[0][1]}) stopped at max_leaves = {max_leaves} leaves, so their values "
                         "would not be exact: raise max_leaves")
    weights = {"retrieval_calls": lam}
    out = {}
    for (q, p), acts in opened.items():
        best = tuple(best_leaf(trees[(q, p + (a,))], weights) for a in acts)
        top = best_leaf(list(best), weights)
        out[(q, p)] = StateValues(q, p, acts, tuple(leaf_reward(lf, weights) for lf in best), best,
                                  top.actions[len(p)])
    return [out[s] for s in states]
