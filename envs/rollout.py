"""The one decision loop over a list of questions: a policy drives env copies through the env's batched loop.

:func:`run_episodes` is what the benchmark's greedy evaluation (:func:`train.evaluate.evaluate_policy`) and the
application pipeline (:class:`kairos.Pipeline`) both run — there is no second implementation of the loop. It
takes the questions in chunks of ``len(envs)``, starts each chunk with :func:`~envs.retrieval_env.reset_batch`
and advances every unfinished episode with one :func:`~envs.retrieval_env.step_batch` call per round (one
batched search and generation per phase), asking a per-episode copy of the policy for each decision. It yields
one :class:`StepEvent` per decision, as soon as its round is done, so a consumer can stream the trace.

A policy is anything with ``decide(observation, info) -> action`` and ``reset(seed)`` (a
:class:`policies.triggers.Trigger`, a :class:`policies.rl.export.LearnedTrigger`). One that also has
``decide_explained(observation, info) -> (action, details)`` says why (a learned policy: its retrieve
probability and threshold; a threshold trigger: the signal's value and the threshold); ``bind_modes(modes)`` is
called once with the env's query modes (a learned QueryGen head picks its modes by name).

Example:
    >>> from envs.vector import make_batched                                   # doctest: +SKIP
    >>> from policies.triggers import NeverTrigger                              # doctest: +SKIP
    >>> venv = make_batched(4, {"split": "dev"})                                # doctest: +SKIP
    >>> [ev.next_info["answer"] for ev in run_episodes(venv.envs, NeverTrigger(), [0, 1]) if ev.done]  # doctest: +SKIP
    ['Answer : Zixco', 'Answer : Brutran']
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from envs.retrieval_env import RetrievalTimingEnv, reset_batch, step_batch


@dataclass
class StepEvent:
    """One decision of one episode, as the loop made it.

    Attributes:
        question_index: the question's index in the env's questions.
        decision: the decision's number in its episode (1-based).
        observation: what the policy saw ...
        info: ... and the env's info it saw (the step it decided about: text, signals).
        action: what the policy returned.
        details: why (``decide_explained``'s details; ``{}`` for a policy that gives none).
        reward: the decision's reward (``−Σ λ·cost``, plus the answer quality at the end of a graded task).
        next_info: the env's info after the decision (what it retrieved; at the end the answer).
        terminated: the episode ended with an answer line ...
        truncated: ... or at ``max_steps``.
        episode_return: the sum of the episode's rewards so far, this one included.
        wall_seconds: wall time since the episode's chunk started (generation is batched across the chunk).
    """

    question_index: int
    decision: int
    observation: dict[str, Any]
    info: dict[str, Any]
    action: Any
    details: dict[str, Any]
    reward: float
    next_info: dict[str, Any]
    terminated: bool
    truncated: bool
    episode_return: float
    wall_seconds: float

    @property
    def done(self) -> bool:
        """Whether this decision ended the episode (``next_info`` then holds the answer)."""
        return self.terminated or self.truncated


def decide(policy: Any, observation: dict[str, Any], info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(action, details)`` of one decision: the policy's ``decide_explained`` when it has one, else its
    ``decide`` with no details. The action is the same either way.

    Example:
        >>> from policies.triggers import AlwaysTrigger
        >>> decide(AlwaysTrigger(), {}, {})
        (1, {})
    """
    fn = getattr(policy, "decide_explained", None)
    if callable(fn):
        return fn(observation, info)
    return policy.decide(observation, info), {}


def run_episodes(envs: list[RetrievalTimingEnv], policy: Any, question_indices: list[int],
                 after_batch: Callable[[], None] | None = None,
                 cost_weights: dict[int, dict[str, float]] | None = None,
                 stop_at_step: int | None = None) -> Iterator[StepEvent]:
    """Greedy episodes of ``policy`` on ``question_indices``, ``len(envs)`` at a time: one :class:`StepEvent` per
    decision (the decisions of one round in the order of the chunk's questions).

    Args:
        envs: env copies sharing one set of components and one cache (``BatchedRetrievalEnv.envs``).
        policy: the policy (see the module docstring). Each episode gets its own shallow copy, reset with the
            question index as seed, so results do not depend on batching or on which questions run together.
        question_indices: indices into the env's questions, run in this order.
        after_batch: called after each chunk's last episode ended (e.g. to fsync a results file).
        cost_weights: question index -> ``{cost: λ}`` its episode pays (and a cost-conditioned policy observes);
            a question without an entry pays what its env copy paid last.
        stop_at_step: every episode stops once this step is generated, before the decision about it (``reset``'s
            option of that name: truncated, ``answer_status`` 'stopped', its quality the task's partial quality;
            nothing after it is generated). ``None``: episodes run to their end.

    Yields:
        :class:`StepEvent` — ``event.done`` marks an episode's last decision.
    """
    if not question_indices:
        return
    if callable(getattr(policy, "bind_modes", None)):  # a learned QueryGen head: its modes by name, in the env's order
        policy.bind_modes(list(envs[0].config.query_modes))
    n = len(envs)
    for start in range(0, len(question_indices), n):
        chunk = [int(q) for q in question_indices[start:start + n]]
        envs_ = envs[:len(chunk)]
        t0 = time.perf_counter()
        trig = [copy.copy(policy) for _ in chunk]  # reset() re-seeds each copy; a net stays shared
        for t, q in zip(trig, chunk):
            t.reset(seed=q)
        outs = reset_batch(envs_, options=[{"question_index": q, **({"cost_weights": cost_weights[q]}
                                                                    if cost_weights and q in cost_weights else {}),
                                            **({"stop_at_step": stop_at_step} if stop_at_step is not None else {})}
                                           for q in chunk])
        obs = [o for o, _ in outs]
        infos = [i for _, i in outs]
        ret = [0.0] * len(chunk)
        steps = [0] * len(chunk)
        active = list(range(len(chunk)))
        while active:
            decided = {j: decide(trig[j], obs[j], infos[j]) for j in active}
            res = step_batch([envs_[j] for j in active], [decided[j][0] for j in active])
            wall = time.perf_counter() - t0
            still = []
            for j, (o, r, te, tr, info) in zip(active, res):
                ret[j] += r
                steps[j] += 1
                yield StepEvent(question_index=chunk[j], decision=steps[j], observation=obs[j], info=infos[j],
                                action=decided[j][0], details=decided[j][1], reward=float(r), next_info=info,
                                terminated=bool(te), truncated=bool(tr), episode_return=ret[j], wall_seconds=wall)
                obs[j], infos[j] = o, info
                if not (te or tr):
                    still.append(j)
            active = still
        if after_batch is not None:
            after_batch()


__all__ = ["StepEvent", "decide", "run_episodes"]
