"""Cost-conditioned policies: one policy for every budget (docs/design.md §7 "Cost-conditioned policies").

The env's ``observe_costs`` puts each named cost's weight in the observation (field ``costs``: log(λ + 0.01),
:func:`envs.costs.cost_feature`); a curriculum schedule with ``high`` makes every training episode draw its λ
log-uniformly from [scheduled λ, high] (:meth:`envs.retrieval_env.RetrievalTimingEnv.set_cost_ranges`), so the policy
learns how the best decision moves with the price. At run time the budget is a setting, not a retraining: the
benchmark evaluates one trained policy at every λ of a grid, and ``kairos answer --lambda`` / ``Pipeline(…, lam=…)``
/ a request's ``lambda`` field tell a served policy its budget.

The warm start needs no new episodes: a counterfactual label is ``ΔR = R(retrieve here) − R(accept here)`` with
``R = quality − Σ_c λ_c·cost_c``, and each branch's quality and raw costs are recorded
(:data:`train.counterfactual.OUTCOME_KEYS`), so the labels at any λ are arithmetic (:func:`labels_at`). The fit draws a
fresh λ per decision every epoch (:class:`CostSampler`) and validates on one fixed draw.

Example:
    >>> import numpy as np
    >>> data = {"cost_names": ["retrieval_calls"], "q_base": np.array([0.0]), "c_base": np.array([[0.0]]),
    ...         "q_accept": np.array([0.0]), "c_accept": np.array([[0.0]]),
    ...         "q_modes": np.array([[1.0]]), "c_modes": np.array([[[1.0]]])}
    >>> [round(float(labels_at(data, np.array([[lam]]))["delta"][0]), 2) for lam in (0.1, 0.5, 1.5)]
    [0.9, 0.5, -0.5]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.core.config import ConfigError


def labels_at(data: dict[str, Any], weights: np.ndarray) -> dict[str, np.ndarray]:
    """The counterfactual labels of every decision at its own λ: ``weights`` [N, C] (one row per decision, columns
    in ``data["cost_names"]`` order). Returns ``delta_modes`` [N, M], ``delta``, ``y``, ``w`` (as
    :func:`train.counterfactual.counterfactual_labels` makes them at one λ) and ``base_reward`` (π₀'s episode
    reward)."""
    w = np.asarray(weights, dtype=np.float64)
    r_accept = data["q_accept"] - (data["c_accept"] * w).sum(-1)
    r_modes = data["q_modes"] - (data["c_modes"] * w[:, None, :]).sum(-1)
    delta_modes = r_modes - r_accept[:, None]
    delta = delta_modes.max(axis=1)
    return {"delta_modes": delta_modes, "delta": delta, "y": (delta > 0).astype(np.float32),
            "w": np.abs(delta).astype(np.float32),
            "base_reward": (data["q_base"] - (data["c_base"] * w).sum(-1)).astype(np.float32)}


class CostSampler:
    """Draws each labelled decision's λ for a cost-conditioned warm start.

    Args:
        cost_names: the labels' costs, in their column order.
        fixed: λ of every cost (the env's weights: what a cost without a range pays).
        ranges: ``{cost: (low, high)}`` — those costs' λ drawn log-uniformly per decision.
        observe: the costs the policy observes (the env's ``observe_costs``), in the field's order.
    """

    def __init__(self, cost_names: list[str], fixed: dict[str, float], ranges: dict[str, tuple[float, float]],
                 observe: list[str]):
        missing = [c for c in (*ranges, *observe) if c not in cost_names]
        if missing:
            raise ConfigError(f"cost-conditioned warm start: costs {missing} are not among the labels' costs "
                              f"{cost_names}")
        self.cost_names, self.ranges, self.observe = list(cost_names), dict(ranges), list(observe)
        self.fixed = np.array([float(fixed.get(c, 0.0)) for c in cost_names])

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """[n, C] weights: the fixed λ, with each ranged cost drawn log-uniformly."""
        w = np.tile(self.fixed, (n, 1))
        for c, (lo, hi) in self.ranges.items():
            j = self.cost_names.index(c)
            w[:, j] = lo if lo == hi else np.exp(rng.uniform(np.log(lo), np.log(hi), size=n))
        return w

    def features(self, weights: np.ndarray) -> np.ndarray:
        """The ``costs`` observation field of each row: log(λ + 0.01) of the observed costs."""
        from envs.costs import COST_FEATURE_OFFSET

        cols = [self.cost_names.index(c) for c in self.observe]
        return np.log(weights[:, cols] + COST_FEATURE_OFFSET).astype(np.float32)

    def grid(self, points: int = 6) -> list[dict[str, float]]:
        """Log-spaced λ of the ranged costs (each at the same quantile), for a report of gain by budget."""
        out = []
        for t in np.linspace(0.0, 1.0, points):
            out.append({c: float(np.exp(np.log(lo) + t * (np.log(hi) - np.log(lo))))
                        for c, (lo, hi) in self.ranges.items()})
        return out


def cost_sampler(data: dict[str, Any], env_costs: dict[str, float], ranges: dict[str, tuple[float, float]],
                 observe: list[str]) -> CostSampler | None:
    """The sampler of a warm start whose policy observes costs (``observe``), ``None`` otherwise; an error when the
    labels lack the branch outcomes (a label set recorded before they were)."""
    if not observe:
        return None
    if "q_modes" not in data:
        raise ConfigError("cost-conditioned warm start: the labels carry no branch outcomes (quality and costs per "
                          "branch); label again (delete the warm start's labels folder)")
    return CostSampler(list(data["cost_names"]), env_costs, ranges, observe)
