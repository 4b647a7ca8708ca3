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

from envs.retrieval_env import reset_batch, step_batch

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
    hits, else one batched generation per decision): ``(episode over?, the last info, the summed raw costs)``; each
    env copy is left at the end of its prefix."""
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


@dataclass
class _Node:
    """A decision tree node being searched: the action prefix, the episode after it and what it cost so far."""

    q: int
    actions: tuple
    ep: Any
    info: dict
    totals: dict
    done: bool


def _step_forks(envs, pairs: list[tuple[_Node, Any]]) -> list[_Node]:
    """Each ``(node, action)``: the node's episode forked into an env copy and stepped with the action, batched."""
    out: list[_Node] = []
    for start in range(0, len(pairs), len(envs)):
        chunk = pairs[start:start + len(envs)]
        es = envs[:len(chunk)]
        for e, (node, _) in zip(es, chunk):
            e.ep = node.ep.fork()
        for e, (node, a), (_, _, te, tr, info) in zip(es, chunk, step_batch(es, [a for _, a in chunk])):
            totals = dict(node.totals)
            for k, v in info["costs"].items():
                totals[k] = totals.get(k, 0.0) + v
            out.append(_Node(node.q, node.actions + (a,), e.ep.fork(), info, totals, bool(te or tr)))
    return out


def search_subtrees(venv, roots: list[tuple[int, tuple]], max_leaves: int = 4096, progress=None,
                    modes: list[int] | None = None, prune_lambda: float | None = None,
                    quality_max: float = 1.0) -> list[list[Leaf]]:
    """The leaves below each root ``(question, action prefix)``: the subtree of the decision tree that starts with
    that prefix, searched breadth first for all roots at once (see :func:`enumerate_leaves_batched`, which is this
    from the empty prefix). A leaf's ``actions`` include its root's prefix, its calls and costs the prefix's.

    Each root prefix is replayed once (trajectory-cache hits); below it every child of a node is one env step from a
    fork of the node's episode (:meth:`envs.episode.Episode.fork`), batched across nodes, questions and roots. Roots
    may nest (a prefix of one root is another root, as along one episode's decisions): each prefix is visited once
    and each leaf recorded for every root above it. With ``prune_lambda`` each root has its own bound (the best
    reward found so far *below that root*): a node is expanded while one root above it can still reach its best, so
    each root's best leaf (:func:`best_leaf`) is the one its full subtree holds; the closed-book continuation of
    every root comes first, then the search goes level by level in retrieval calls (every node with c calls before
    any with c + 1). A root that reaches ``max_leaves`` leaves stops growing (logged; its list is then not its
    whole subtree)."""
    envs = venv.envs
    cfg = envs[0].config
    accept, retrieve = tree_actions(cfg, modes)
    roots = [(int(q), tuple(p)) for q, p in roots]
    by_q: dict[int, list[int]] = {}
    for i, (q, _) in enumerate(roots):
        by_q.setdefault(q, []).append(i)
    leaves: list[list[Leaf]] = [[] for _ in roots]
    best = [-float("inf")] * len(roots)  # best leaf reward so far below each root (pruning only)
    seen: set[tuple[int, tuple]] = set()  # the prefixes visited (each once)

    def owners(q: int, a: tuple) -> list[int]:
        return [i for i in by_q[q] if a[:len(roots[i][1])] == roots[i][1]]

    def worth(q: int, a: tuple, calls: int) -> bool:
        return any(len(leaves[i]) < max_leaves and (prune_lambda is None
                                                     or quality_max - prune_lambda * calls >= best[i] - 1e-12)
                   for i in owners(q, a))

    def record(n: _Node) -> None:
        leaf = Leaf(n.actions, float(n.info["quality"]), int(n.info["retrievals"]), n.totals)
        for i in owners(n.q, n.actions):
            leaves[i].append(leaf)
            if prune_lambda is not None:
                best[i] = max(best[i], leaf.quality - prune_lambda * leaf.calls)
            if len(leaves[i]) == max_leaves:
                log.warning("question %d, prefix %s: stopped after %d leaves", n.q, roots[i][1], max_leaves)
        if progress is not None:
            progress.update(1)

    def children(n: _Node, only_accept: bool) -> tuple[list, list]:
        """``(pairs to step now, (pair, calls) deferred to the next call level)`` below an open node."""
        calls = int(n.info["retrievals"])
        now = [(n, accept)] if worth(n.q, n.actions, calls) else []
        if only_accept or not can_retrieve(cfg, n.info) or not worth(n.q, n.actions, calls + 1):
            return now, []
        if prune_lambda is None:
            return now + [(n, r) for r in retrieve], []
        return now, [(n, r, calls + 1) for r in retrieve]

    def search(nodes: list[_Node], only_accept: bool, deferred: list) -> list[_Node]:
        """Expand ``nodes`` and ``deferred`` pairs (accept chains now, retrievals by call level); returns the open
        nodes it visited."""
        opened, level = [], 0
        while nodes or deferred:
            if not nodes:  # every node of this call level is done: the bounds are final for it
                level += 1
                pairs = [(n, a) for n, a, c in deferred if worth(n.q, n.actions, c)]
                deferred = []
            else:
                pairs = []
                for n in nodes:
                    if n.done:
                        record(n)
                        continue
                    opened.append(n)
                    now, later = children(n, only_accept)
                    pairs += now
                    deferred += later
            pairs = [(n, a) for n, a in pairs if (n.q, n.actions + (a,)) not in seen]
            seen.update((n.q, n.actions + (a,)) for n, a in pairs)
            if progress is not None:
                progress.set_postfix_str(f"{len(pairs)} open prefixes"
                                         + (f", level {level}" if prune_lambda is not None else ""))
            nodes = _step_forks(envs, pairs)
        return opened

    starts: list[_Node] = []
    uniq = list(dict.fromkeys(roots))
    for start in range(0, len(uniq), len(envs)):
        chunk = uniq[start:start + len(envs)]
        for (q, a), (done, info, totals), e in zip(chunk, replay(envs, chunk), envs):
            starts.append(_Node(q, a, e.ep.fork(), info, totals, done))
    seen.update((n.q, n.actions) for n in starts)
    if prune_lambda is None:
        search(starts, only_accept=False, deferred=[])
    else:  # the closed-book continuations first: their rewards bound the subtrees; then their retrieval branches
        opened = search(starts, only_accept=True, deferred=[])
        search([], only_accept=False, deferred=[(n, r, int(n.info["retrievals"]) + 1) for n in opened
                                                if can_retrieve(cfg, n.info) for r in retrieve])
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
