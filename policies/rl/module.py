"""The RLlib side of the learned policy: :class:`KairosRLModule` and its action distribution.

The module wraps :class:`policies.rl.net.PolicyNet`. Its ``ACTION_DIST_INPUTS`` are the retrieve log-probs
(after the exploration floor) followed, with QueryGen, by the query-mode logits;
:class:`RetrieveQueryDistribution` reads them and gives the joint log-prob
``log π(retrieve) + retrieve · log π(mode)`` — the QueryGen term counts only when the policy retrieved.

``model_config`` keys: ``arch``, ``d_model``, ``n_layers``, ``n_heads``, ``ff_dim``, ``explore_floor``
(the learner adds a barrier keeping π(retrieve) ≥ floor on every visited state), ``explore_mix``
(optional ε-mix of the sampling policy with uniform; greedy inference ignores both),
``freeze`` (parameter groups to freeze: ``trunk``, ``retrieve``, ``query``, ``value``), ``query_modes``,
``drop_fields`` (observation fields the policy ignores — observation ablations), ``content_dim`` (each
``*_embedding`` field is PCA-projected to that width, fitted on the first training batch; see
:mod:`policies.rl.net`).

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    >>> obs = gym.spaces.Dict({"pulse": gym.spaces.Box(-1, 1, (3,), np.float32)})
    >>> m = RLModuleSpec(module_class=KairosRLModule, observation_space=obs,
    ...                  action_space=gym.spaces.Discrete(2), model_config={"arch": "mlp"}).build()
    >>> type(m.net).__name__
    'PolicyNet'
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.distribution import Distribution
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from policies.rl.net import PolicyNet, PolicySpec, floor_logits


def spec_from_spaces(observation_space: gym.spaces.Dict, action_space: gym.Space,
                     model_config: dict[str, Any]) -> PolicySpec:
    """The :class:`PolicySpec` of a Dict observation space and a ``Discrete(2)`` / ``Tuple`` action space."""
    if not isinstance(observation_space, gym.spaces.Dict):
        raise ValueError(f"KairosRLModule needs a Dict observation space, got {observation_space}")
    drop = set(model_config.get("drop_fields", []))
    unknown = drop - set(observation_space.spaces)
    if unknown:
        raise ValueError(f"KairosRLModule: drop_fields {sorted(unknown)} are not observation fields "
                         f"(fields: {sorted(observation_space.spaces)})")
    fields = {k: int(torch.tensor(s.shape).prod().item()) if s.shape else 1
              for k, s in observation_space.spaces.items() if k not in drop}
    if isinstance(action_space, gym.spaces.Tuple):
        n_modes = int(action_space.spaces[1].n)
    elif isinstance(action_space, gym.spaces.Discrete) and action_space.n == 2:
        n_modes = 1
    else:
        raise ValueError(f"KairosRLModule: action space must be Discrete(2) or Tuple(Discrete(2), Discrete(n)), "
                         f"got {action_space}")
    keys = ("arch", "d_model", "n_layers", "n_heads", "ff_dim", "normalize")
    content_dim = int(model_config.get("content_dim", 0) or 0)
    reduce = {k: content_dim for k in fields if k.endswith("_embedding")} if content_dim > 0 else {}
    return PolicySpec(fields=fields, n_modes=n_modes, query_modes=list(model_config.get("query_modes", [])),
                      reduce=reduce, **{k: model_config[k] for k in keys if k in model_config})


class RetrieveQueryDistribution(Distribution):
    """Joint distribution over ``retrieve`` ∈ {0, 1} and (optionally) a query mode.

    Inputs: ``[B, 2]`` retrieve logits, or ``[B, 2 + n_modes]`` with QueryGen. Samples are a ``[B]`` tensor
    (plain) or a ``(retrieve, mode)`` tuple. ``logp = log π(r) + r·log π(m)``; ``entropy = H(r) + π(1)·H(m)``.
    """

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits
        self.retrieve = torch.distributions.Categorical(logits=logits[..., :2], validate_args=False)
        self.mode = (torch.distributions.Categorical(logits=logits[..., 2:], validate_args=False)
                     if logits.shape[-1] > 2 else None)

    @classmethod
    @override(Distribution)
    def from_logits(cls, logits: torch.Tensor, **kwargs) -> RetrieveQueryDistribution:
        return cls(logits)

    @staticmethod
    @override(Distribution)
    def required_input_dim(space: gym.Space, **kwargs) -> int:
        return 2 + (int(space.spaces[1].n) if isinstance(space, gym.spaces.Tuple) else 0)

    @override(Distribution)
    def sample(self, *, sample_shape=None, **kwargs):
        shape = torch.Size() if sample_shape is None else sample_shape
        r = self.retrieve.sample(shape)
        if self.mode is None:
            return r
        return r, self.mode.sample(shape)

    @override(Distribution)
    def rsample(self, *, sample_shape=None, **kwargs):
        raise NotImplementedError("RetrieveQueryDistribution is discrete: no reparameterised samples")

    @override(Distribution)
    def logp(self, value, **kwargs) -> torch.Tensor:
        if self.mode is None:
            r = value[0] if isinstance(value, (tuple, list)) else value
            return self.retrieve.log_prob(r.long())
        r, m = (value[0], value[1]) if isinstance(value, (tuple, list)) else (value[..., 0], value[..., 1])
        r = r.long()
        return self.retrieve.log_prob(r) + r.float() * self.mode.log_prob(m.long())

    @override(Distribution)
    def entropy(self) -> torch.Tensor:
        h = self.retrieve.entropy()
        if self.mode is not None:
            h = h + self.retrieve.probs[..., 1] * self.mode.entropy()
        return h

    @override(Distribution)
    def kl(self, other: RetrieveQueryDistribution) -> torch.Tensor:
        kl = torch.distributions.kl_divergence(self.retrieve, other.retrieve)
        if self.mode is not None:
            kl = kl + self.retrieve.probs[..., 1] * torch.distributions.kl_divergence(self.mode, other.mode)
        return kl

    def retrieve_prob(self) -> torch.Tensor:
        """π(retrieve = 1) per row."""
        return self.retrieve.probs[..., 1]

    def to_deterministic(self) -> _GreedyDistribution:
        return _GreedyDistribution(self.logits)


class _GreedyDistribution(RetrieveQueryDistribution):
    """The argmax of :class:`RetrieveQueryDistribution` (RLlib's inference path)."""

    @override(RetrieveQueryDistribution)
    def sample(self, *, sample_shape=None, **kwargs):
        r = torch.argmax(self.logits[..., :2], dim=-1)
        if self.mode is None:
            return r
        return r, torch.argmax(self.logits[..., 2:], dim=-1)


class KairosRLModule(TorchRLModule):
    """Retrieval trigger + QueryGen head + value head over field tokens (see the module docstring)."""

    @override(TorchRLModule)
    def setup(self):
        cfg = dict(self.model_config or {})
        self.explore_floor = float(cfg.get("explore_floor", 0.0))
        self.explore_mix = float(cfg.get("explore_mix", 0.0))
        self.net = PolicyNet(spec_from_spaces(self.observation_space, self.action_space, cfg))
        self.net.freeze(list(cfg.get("freeze", [])))

    def _dist_inputs(self, batch: dict, floor: float) -> dict[str, torch.Tensor]:
        out = self.net.forward_heads(batch[Columns.OBS])
        parts = [floor_logits(out["retrieve_logits"], floor)]
        if self.net.query_head is not None:
            parts.append(out["mode_logits"])
        return {Columns.ACTION_DIST_INPUTS: torch.cat(parts, dim=-1), Columns.VF_PREDS: out["value"]}

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict, **kwargs) -> dict:
        with torch.no_grad():
            return self._dist_inputs(batch, 0.0)

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict, **kwargs) -> dict:
        with torch.no_grad():
            return self._dist_inputs(batch, self.explore_mix)

    @override(TorchRLModule)
    def _forward_train(self, batch: dict, **kwargs) -> dict:
        # The learner differentiates the raw policy (with explore_mix > 0 the samples come from the mixture:
        # no importance correction, bias O(mix)). The floor itself is a barrier in the loss
        # (train.reinforce.reinforce_loss): differentiating a floored mixture vanishes once the raw policy
        # saturates at "never retrieve", and it never recovers (measured on the toy env).
        # only the learner calls _forward_train: its batches update the input statistics (synced to the
        # env runners with the weights)
        if self.net.needs_reducer_fit:  # the content fields' PCA: fitted once, on the first training batch
            self.net.fit_reducers(batch[Columns.OBS])
        self.net.update_normalizer(batch[Columns.OBS])
        return self._dist_inputs(batch, 0.0)

    @override(TorchRLModule)
    def get_train_action_dist_cls(self):
        return RetrieveQueryDistribution

    @override(TorchRLModule)
    def get_exploration_action_dist_cls(self):
        return RetrieveQueryDistribution

    @override(TorchRLModule)
    def get_inference_action_dist_cls(self):
        return RetrieveQueryDistribution
