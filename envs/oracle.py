"""The cache oracle: for each question, the best action sequence of any timing policy (docs/design.md §5).

Greedy decoding makes every episode a deterministic function of its action sequence, so the oracle
enumerates the decision tree by depth-first search over the env (replays are trajectory-cache hits).
The result per question is every leaf's ``(quality, retrieval calls, raw costs)``; the best sequence at
any cost weights λ is then a max over leaves, with no more generation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

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
    search, in another order (:func:`best_leaf` does not depend on it).

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
    from envs.retrieval_env import reset_batch, step_batch

    envs = venv.envs
    cfg = envs[0].config
    if (modes is not None) != bool(cfg.querygen):
        raise ValueError("enumerate_leaves_batched: modes need an env with querygen actions, and such an env modes")
    accept = (0, 0) if modes is not None else 0
    retrieve = [(1, int(m)) for m in modes] if modes is not None else [1]
    leaves: dict[int, list[Leaf]] = {int(q): [] for q in question_indices}
    best = {int(q): -float("inf") for q in question_indices}  # best leaf reward so far (pruning only)

    def worth(q: int, calls: int) -> bool:
        return prune_lambda is None or quality_max - prune_lambda * calls >= best[q] - 1e-12

    def search(frontier: list[tuple[int, tuple]], only_accept: bool, never_recorded: bool) -> None:
        calls_level = 0  # with pruning: the prefixes open now have this many calls; one more waits in `deferred`
        deferred: list[tuple[int, tuple, int]] = []  # (question, prefix, its calls)
        while frontier or deferred:
            if not frontier:  # every leaf with calls_level calls is done: the bound is final for this level
                calls_level += 1
                frontier = [(q, a) for q, a, c in deferred if worth(q, c)]
                deferred = []
                continue
            nxt: list[tuple[int, tuple]] = []
            for start in range(0, len(frontier), len(envs)):
                chunk = frontier[start:start + len(envs)]
                es = envs[:len(chunk)]
                infos = [i for _, i in reset_batch(es, options=[{"question_index": q} for q, _ in chunk])]
                totals: list[dict] = [{} for _ in chunk]
                done = [False] * len(chunk)
                for t in range(max(len(a) for _, a in chunk)):
                    idx = [j for j, (_, a) in enumerate(chunk) if t < len(a)]
                    for j, (_, _, te, tr, info) in zip(idx, step_batch([es[j] for j in idx],
                                                                      [chunk[j][1][t] for j in idx])):
                        infos[j], done[j] = info, bool(te or tr)
                        for k, v in info["costs"].items():
                            totals[j][k] = totals[j].get(k, 0.0) + v
                for j, (q, a) in enumerate(chunk):
                    info = infos[j]
                    if done[j]:
                        if not (never_recorded and all(x == accept for x in a)):  # no leaf twice
                            leaf = Leaf(a, float(info["quality"]), int(info["retrievals"]), totals[j])
                            leaves[q].append(leaf)
                            if prune_lambda is not None:
                                best[q] = max(best[q], leaf.quality - prune_lambda * leaf.calls)
                            if progress is not None:
                                progress.update(1)
                        continue
                    if len(leaves[q]) >= max_leaves:
                        log.warning("question %d: stopped after %d leaves", q, max_leaves)
                        continue
                    calls = int(info["retrievals"])
                    if worth(q, calls):
                        nxt.append((q, a + (accept,)))
                    if (not only_accept and info["retrievals"] < cfg.max_retrievals_per_question
                            and info["retrievals_this_step"] < cfg.max_retrievals_per_step and worth(q, calls + 1)):
                        if prune_lambda is None:
                            nxt += [(q, a + (r,)) for r in retrieve]
                        else:
                            deferred += [(q, a + (r,), calls + 1) for r in retrieve]
            if progress is not None:
                progress.set_postfix_str(f"{len(nxt)} open prefixes"
                                         + (f", {calls_level} calls" if prune_lambda is not None else ""))
            frontier = nxt

    if prune_lambda is not None:  # the closed-book chain first: its reward bounds the whole tree
        search([(int(q), ()) for q in question_indices], only_accept=True, never_recorded=False)
    search([(int(q), ()) for q in question_indices], only_accept=False, never_recorded=prune_lambda is not None)
    return leaves


def best_leaf(leaves: list[Leaf], weights: dict[str, float]) -> Leaf:
    """The leaf with the highest ``quality − Σ λ·cost`` (ties: fewer calls, then lexicographic)."""
    def score(leaf: Leaf):
        pen = sum(weights.get(k, 0.0) * v for k, v in leaf.costs.items())
        flat = tuple(-x for a in leaf.actions for x in (a if isinstance(a, tuple) else (a,)))
        return (leaf.quality - pen, -leaf.calls, flat)
    return max(leaves, key=score)
