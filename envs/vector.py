"""``BatchedRetrievalEnv``: N env copies that advance with ONE batched search and generation call per phase.

The copies go through the env's own batch-first decision loop together (:func:`envs.retrieval_env.step_batch`;
greedy generation is batch-invariant, so results equal the single-env ones). They share one set of components —
one model in memory — and one trajectory cache.

It is a standard Gymnasium ``VectorEnv`` (next-step autoreset), so anything that consumes vector envs can
use it: ``envs.vector.make_batched(n, config)``.

**A question schedule** (:meth:`BatchedRetrievalEnv.schedule_questions`, what group baselines sample with:
``train.groups``): the next ``reset()`` starts a *round* in which the copies take the scheduled question indices in
order, one per episode (at that reset, then at each autoreset); once the schedule is used up, a copy whose episode
ends *parks* — it repeats its last observation with reward 0, never terminated nor truncated, ignoring its action,
and ``info["parked"]`` is true — until the next ``reset()``. So a consumer that counts finished episodes (RLlib's
``sample(num_episodes=len(schedule))``) gets exactly the scheduled episodes, whatever their lengths. A ``reset()``
without a new schedule ends the round (questions drawn at random again).
"""

from __future__ import annotations

from collections import deque
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from envs.retrieval_env import EnvUsageError, RetrievalTimingEnv, _question_index, reset_batch, step_batch


class BatchedRetrievalEnv(VectorEnv):
    """Vector env over ``num_envs`` copies of :class:`RetrievalTimingEnv` with batched generation."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, config=None, components=None):
        first = RetrievalTimingEnv(config, components=components)
        self.envs = [first] + [RetrievalTimingEnv(first.config, components=first.c) for _ in range(num_envs - 1)]
        for e in self.envs[1:]:
            e.cache = first.cache  # one cache object: hits of one copy serve the others
        self.num_envs = num_envs
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(first.observation_space, num_envs)
        self.action_space = batch_space(first.action_space, num_envs)
        self._needs_reset = np.zeros(num_envs, dtype=bool)
        self._obs_buf = create_empty_array(first.observation_space, n=num_envs, fn=np.zeros)
        self._pending: list[int] | None = None  # a schedule armed for the next reset()
        self._queue: deque[int] | None = None   # the round's questions not yet started (None: no round)
        self._parked = np.zeros(num_envs, dtype=bool)
        self._last_obs: list[Any] = [None] * num_envs

    @property
    def reasoner(self):
        return self.envs[0].c.reasoner

    @property
    def num_questions(self) -> int:
        """How many questions the copies draw from (the split's first ``max_questions``): the valid indices of
        :meth:`schedule_questions` are ``0 … num_questions − 1``."""
        e = self.envs[0]
        return len(e.c.questions[: e.config.max_questions or None])

    def schedule_questions(self, indices: list[int]) -> None:
        """Arm a round for the next ``reset()``: the copies take ``indices`` in order, one per episode, then park
        (see the module docstring). An index that is not an integer in ``[0, num_questions)`` is an
        :class:`~envs.retrieval_env.EnvUsageError` here, before any episode starts."""
        n = self.num_questions
        checked = [_question_index({"question_index": i}, n) for i in indices]
        if None in checked:
            raise EnvUsageError(f"schedule_questions: every entry must be a question index in [0, {n}), got None")
        self._pending = checked

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i for i in range(self.num_envs)]
        self._queue, self._pending = (deque(self._pending), None) if self._pending is not None else (None, None)
        self._parked[:] = False
        if self._queue is None:
            outs = reset_batch(self.envs, seeds, [options] * self.num_envs)
        else:  # a scheduled round: the first copies take the first questions, the others park at once
            if options:
                raise EnvUsageError("reset(options=…) with a question schedule armed: the schedule picks the "
                                    "questions (call schedule_questions or pass options, not both)")
            live = list(range(min(self.num_envs, len(self._queue))))
            started = reset_batch([self.envs[i] for i in live], [seeds[i] for i in live],
                                  [{"question_index": self._queue.popleft()} for _ in live])
            outs = started + [self._park(i) for i in range(len(live), self.num_envs)]
        self._needs_reset[:] = False
        infos: dict[str, Any] = {}
        for i, (o, info) in enumerate(outs):
            self._last_obs[i] = o
            infos = self._add_info(infos, info, i)
        return self._batch_obs([o for o, _ in outs]), infos

    def step(self, actions):
        # next-step autoreset: copies whose episode ended last step start a new question instead of stepping
        resets = [i for i in range(self.num_envs) if self._needs_reset[i] and not self._parked[i]]
        steps = [i for i in range(self.num_envs) if not self._needs_reset[i] and not self._parked[i]]
        acts = [actions[i] if not isinstance(actions, tuple) else tuple(x[i] for x in actions) for i in steps]
        outs: dict[int, tuple] = {i: self._park(i) for i in range(self.num_envs) if self._parked[i]}
        if self._queue is not None:  # a scheduled round: the next questions, or park once they are all started
            taking = resets[:len(self._queue)]
            for i in resets[len(taking):]:
                outs[i] = self._park(i)
            resets = taking
            opts = [{"question_index": self._queue.popleft()} for _ in resets]
        else:
            opts = None
        outs.update(zip(resets, reset_batch([self.envs[i] for i in resets], None, opts)))
        outs.update(zip(steps, step_batch([self.envs[i] for i in steps], acts)))
        obs, rew = [], np.zeros(self.num_envs, dtype=np.float64)
        term = np.zeros(self.num_envs, dtype=bool)
        trunc = np.zeros(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            if len(outs[i]) == 2:  # a reset (a parked copy's too): no reward, not done
                o, info = outs[i]
                self._needs_reset[i] = False
            else:
                o, r, te, tr, info = outs[i]
                rew[i], term[i], trunc[i] = r, te, tr
                self._needs_reset[i] = te or tr
            obs.append(o)
            self._last_obs[i] = o
            infos = self._add_info(infos, info, i)
        return self._batch_obs(obs), rew, term, trunc, infos

    def _park(self, i: int) -> tuple[Any, dict[str, Any]]:
        """Copy ``i`` waits for the next ``reset()``: its last observation again (a zero one if it has none)."""
        self._parked[i] = True
        o = self._last_obs[i]
        if o is None:
            o = create_empty_array(self.single_observation_space, fn=np.zeros)
        return o, {"parked": True}

    def _batch_obs(self, obs: list) -> Any:
        # a fresh copy each call (like SyncVectorEnv(copy=True)): consumers such as RLlib keep per-env *views*
        # of the batch in their episodes, so reusing one buffer silently overwrote every stored observation
        return deepcopy(concatenate(self.single_observation_space, obs, self._obs_buf))

    def set_cost_weights(self, weights: dict[str, float]) -> None:
        for e in self.envs:
            e.set_cost_weights(weights)

    def set_cost_ranges(self, ranges: dict[str, tuple[float, float]]) -> None:
        for e in self.envs:
            e.set_cost_ranges(ranges)

    def close_extras(self, **kwargs):
        envs = getattr(self, "envs", None)  # None when the constructor failed: nothing to close
        if envs:
            envs[0].close()  # the copies share its cache: every copy is closed with it
            for e in envs[1:]:
                e.closed = True


def make_batched(num_envs: int, config=None, components=None) -> BatchedRetrievalEnv:
    """A :class:`BatchedRetrievalEnv` of ``num_envs`` copies (shared model, cache and components)."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return BatchedRetrievalEnv(num_envs, config, components)


__all__ = ["BatchedRetrievalEnv", "make_batched", "gym"]
