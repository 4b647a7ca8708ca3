"""The cache oracle: for each question, the best action sequence of any timing policy (DESIGN §5).

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


def best_leaf(leaves: list[Leaf], weights: dict[str, float]) -> Leaf:
    """The leaf with the highest ``quality − Σ λ·cost`` (ties: fewer calls, then lexicographic)."""
    def score(leaf: Leaf):
        pen = sum(weights.get(k, 0.0) * v for k, v in leaf.costs.items())
        return (leaf.quality - pen, -leaf.calls, tuple(-a for a in leaf.actions))
    return max(leaves, key=score)
