"""A toy retrieval-timing env with a known optimum (for "it learns" tests of the REINFORCE trainer).

Same observation Dict as the micro-world. Each episode has ``T = 4`` decisions; exactly one of them is
"hard" (``rsus[0] = 1`` there, ``0`` elsewhere, plus small noise). Answer quality is 0.6, or 1.0 when the
policy retrieved at the hard step (+0.4 at most); each retrieval costs λ. So at λ < 0.4 the optimum is
"retrieve exactly at the hard step" (reward 1.0 − λ), and at λ > 0.4 it is "never retrieve" (0.6).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

T = 4


class ToyTimingEnv(gym.Env):
    def __init__(self, config: dict | None = None):
        config = dict(config or {})
        self.lam = float(config.get("costs", {}).get("retrieval_calls", 0.1))
        self.querygen = bool(config.get("querygen", False))
        box = lambda n: spaces.Box(-np.inf, np.inf, (n,), np.float32)  # noqa: E731
        self.observation_space = spaces.Dict({"pulse": box(12), "output": box(4), "rsus": box(4),
                                              "history": box(4), "mask": box(3)})
        self.action_space = (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(4))) if self.querygen
                             else spaces.Discrete(2))

    def set_cost_weights(self, weights: dict[str, float]) -> None:
        self.lam = float(weights.get("retrieval_calls", self.lam))

    def _obs(self):
        r = self.np_random
        hard = float(self.t == self.hard)
        rsus = np.r_[hard, r.normal(0, 0.1, 3)].astype(np.float32)
        rsus[0] += r.normal(0, 0.1)
        return {"pulse": r.normal(0, 1, 12).astype(np.float32), "output": r.normal(0, 1, 4).astype(np.float32),
                "rsus": rsus, "history": np.array([self.t + 1, self.n, 0, 0], np.float32),
                "mask": np.ones(3, np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.n, self.hit = 0, 0, False
        self.hard = int(self.np_random.integers(T))
        return self._obs(), {}

    def step(self, action):
        retrieve = int(action[0]) if isinstance(action, (tuple, list, np.ndarray)) and np.ndim(action) else int(action)
        if retrieve:
            self.n += 1
            self.hit |= self.t == self.hard
        reward = -self.lam * retrieve
        info = {"costs": {"retrieval_calls": float(retrieve)}, "cost_weights": {"retrieval_calls": self.lam},
                "retrievals": self.n, "hard": self.t == self.hard}
        self.t += 1
        done = self.t >= T
        if done:
            info["quality"] = 1.0 if self.hit else 0.6
            reward += info["quality"]
        return self._obs(), float(reward), done, False, info


def make_toy_env(config: dict | None = None) -> ToyTimingEnv:
    return ToyTimingEnv(config)


def make_failing_env(config: dict | None = None):
    """An env factory that fails where it runs (inside a remote EnvRunner), as a missing data file would."""
    raise ValueError("toy env: data file /nonexistent/toy.jsonl not found (set env_config.path)")
