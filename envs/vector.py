"""``BatchedRetrievalEnv``: N env copies that advance with ONE batched search and generation call per phase.

The copies go through the env's own batch-first decision loop together (:func:`envs.retrieval_env.step_batch`;
greedy generation is batch-invariant, so results equal the single-env ones). They share one set of components —
one model in memory — and one trajectory cache.

It is a standard Gymnasium ``VectorEnv`` (next-step autoreset), so anything that consumes vector envs can
use it: ``envs.vector.make_batched(n, config)``.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from envs.retrieval_env import RetrievalTimingEnv, reset_batch, step_batch


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

    @property
    def reasoner(self):
        return self.envs[0].c.reasoner

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i for i in range(self.num_envs)]
        outs = reset_batch(self.envs, seeds, [options] * self.num_envs)
        self._needs_reset[:] = False
        infos: dict[str, Any] = {}
        for i, (_, info) in enumerate(outs):
            infos = self._add_info(infos, info, i)
        return self._batch_obs([o for o, _ in outs]), infos

    def step(self, actions):
        # next-step autoreset: copies whose episode ended last step start a new question instead of stepping
        resets = [i for i in range(self.num_envs) if self._needs_reset[i]]
        steps = [i for i in range(self.num_envs) if not self._needs_reset[i]]
        acts = [actions[i] if not isinstance(actions, tuple) else tuple(x[i] for x in actions) for i in steps]
        outs: dict[int, tuple] = dict(zip(resets, reset_batch([self.envs[i] for i in resets])))
        outs.update(zip(steps, step_batch([self.envs[i] for i in steps], acts)))
        obs, rew = [], np.zeros(self.num_envs, dtype=np.float64)
        term = np.zeros(self.num_envs, dtype=bool)
        trunc = np.zeros(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            if i in resets:
                o, info = outs[i]
                self._needs_reset[i] = False
            else:
                o, r, te, tr, info = outs[i]
                rew[i], term[i], trunc[i] = r, te, tr
                self._needs_reset[i] = te or tr
            obs.append(o)
            infos = self._add_info(infos, info, i)
        return self._batch_obs(obs), rew, term, trunc, infos

    def _batch_obs(self, obs: list) -> Any:
        # a fresh copy each call (like SyncVectorEnv(copy=True)): consumers such as RLlib keep per-env *views*
        # of the batch in their episodes, so reusing one buffer silently overwrote every stored observation
        return deepcopy(concatenate(self.single_observation_space, obs, self._obs_buf))

    def set_cost_weights(self, weights: dict[str, float]) -> None:
        for e in self.envs:
            e.set_cost_weights(weights)

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
