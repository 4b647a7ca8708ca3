"""REINFORCE on RLlib's new API stack, shaped like RLlib's VPG example (docs/design.md §7).

* :class:`ReinforceConfig` — an ``AlgorithmConfig`` with a fluent ``.training(baseline=…, …)``;
* :class:`Reinforce` — ``training_step``: set the curriculum's λ on every EnvRunner, sample complete
  episodes (with ``group_size`` G > 1: G rollouts of each question, :mod:`train.groups`), update the learner,
  sync weights;
* :class:`ReinforceTorchLearner` — returns-to-go (γ = 1) via RLlib's ``ComputeReturnsToGo`` connector (and,
  for a group baseline, :class:`ComputeGroupAdvantages`), then :func:`reinforce_loss` (baseline
  ``none | mean | value | rloo | grpo``, advantage scaling, entropy bonus); gradient clipping is RLlib's
  (``grad_clip``, global norm);
* :class:`KairosMetricsCallback` — per-episode answer quality, retrievals, each cost and its λ.

Example:
    >>> import torch
    >>> out = reinforce_loss(torch.tensor([-0.5, -1.0]), torch.zeros(2), torch.tensor([1.0, 0.0]),
    ...                      None, baseline="none", normalize_advantages=False, entropy_coeff=0.0)
    >>> round(float(out["total_loss"]), 3)
    0.25
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch
import tree
from ray.rllib.algorithms import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.learner import ComputeReturnsToGo
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from train.curriculum import Curriculum, apply_cost_weights
from train.groups import GROUP_BASELINES, episode_group, group_advantages, sample_groups

#: every baseline :func:`reinforce_loss` knows
BASELINES = ("none", "mean", "value", *GROUP_BASELINES)

log = logging.getLogger(__name__)


def reinforce_loss(logp: torch.Tensor, entropy: torch.Tensor, returns: torch.Tensor,
                   values: torch.Tensor | None, *, baseline: str, normalize_advantages: bool,
                   entropy_coeff: float, vf_loss_coeff: float = 0.5, retrieve_logp: torch.Tensor | None = None,
                   floor: float = 0.0, floor_coeff: float = 1.0,
                   advantages: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The REINFORCE loss of one batch of time steps (all from complete episodes).

    ``A = G − b`` with ``b = 0`` (none), ``mean(G)`` over the batch (mean) or ``V(s)`` detached (value); the
    group baselines (rloo, grpo) take ``advantages`` as given — each step's episode-level group advantage
    (:func:`train.groups.group_advantages`); with ``normalize_advantages`` ``A ← A / (std(A) + 1e-8)`` (population std; no re-centering, so the
    baselines stay distinct). ``total = −mean(logp·A) − c_H·mean(H) + c_V·mean((V − G)²)`` (last term only
    for the value baseline). Anti-collapse barrier (when ``floor > 0`` and ``retrieve_logp`` = log π(retrieve=1)
    per step is given): ``+ c_F·mean(relu(log floor − log π(retrieve=1)))`` — its gradient does not vanish
    however saturated the policy is, so "never retrieve" stays one cheap step from "retrieve here".
    """
    returns = returns.float()
    if baseline == "none":
        adv = returns
    elif baseline == "mean":
        adv = returns - returns.mean()
    elif baseline == "value":
        if values is None:
            raise ValueError("baseline='value' needs value predictions")
        adv = returns - values.detach()
    elif baseline in GROUP_BASELINES:
        if advantages is None:
            raise ValueError(f"baseline='{baseline}' needs the group advantages (ComputeGroupAdvantages)")
        adv = advantages.float()
    else:
        raise ValueError(f"unknown baseline '{baseline}' (valid: {', '.join(BASELINES)})")
    if normalize_advantages and adv.numel() > 1:
        adv = adv / (adv.std(unbiased=False) + 1e-8)
    policy_loss = -(logp * adv).mean()
    mean_entropy = entropy.mean()
    total = policy_loss - entropy_coeff * mean_entropy
    vf_loss = torch.zeros((), device=returns.device)
    if baseline == "value":
        vf_loss = ((values - returns) ** 2).mean()
        total = total + vf_loss_coeff * vf_loss
    floor_loss = torch.zeros((), device=returns.device)
    if floor > 0 and retrieve_logp is not None:
        floor_loss = torch.relu(math.log(floor) - retrieve_logp).mean()
        total = total + floor_coeff * floor_loss
    return {"total_loss": total, "policy_loss": policy_loss, "entropy": mean_entropy, "vf_loss": vf_loss,
            "floor_loss": floor_loss,
            "advantage_mean": adv.mean().detach()}


class ReinforceConfig(AlgorithmConfig):
    """Config of :class:`Reinforce` (REINFORCE with a baseline, on complete episodes).

    Example:
        >>> cfg = ReinforceConfig().training(baseline="mean", entropy_coeff=0.0, num_episodes_per_train_batch=8)
        >>> cfg.baseline, cfg.num_episodes_per_train_batch
        ('mean', 8)
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or Reinforce)
        self.num_episodes_per_train_batch = 64
        self.baseline = "value"
        self.normalize_advantages = True
        self.entropy_coeff = 0.01
        self.vf_loss_coeff = 0.5
        self.floor_coeff = 1.0
        self.group_size = 1
        self.curriculum: dict[str, dict] = {}
        self.gamma = 1.0
        self.batch_mode = "complete_episodes"
        self.num_env_runners = 0
        self.lr = 3e-3
        self.grad_clip = 1.0
        self.grad_clip_by = "global_norm"

    @override(AlgorithmConfig)
    def training(self, *, num_episodes_per_train_batch=NotProvided, baseline=NotProvided,
                 normalize_advantages=NotProvided, entropy_coeff=NotProvided, vf_loss_coeff=NotProvided,
                 floor_coeff=NotProvided, curriculum=NotProvided, group_size=NotProvided,
                 **kwargs) -> ReinforceConfig:
        """REINFORCE settings (plus everything ``AlgorithmConfig.training`` takes: lr, grad_clip, gamma, …).

        Args:
            num_episodes_per_train_batch: complete episodes per iteration.
            baseline: ``none | mean | value | rloo | grpo`` (the last two need ``group_size >= 2``).
            normalize_advantages: scale advantages by their batch std.
            entropy_coeff: entropy bonus weight.
            vf_loss_coeff: value-head MSE weight (baseline ``value``).
            floor_coeff: weight of the exploration-floor barrier (the floor is the module's ``explore_floor``).
            curriculum: cost name -> schedule dict (:class:`train.curriculum.ScheduleConfig` fields).
            group_size: rollouts of each question per batch (> 1: :mod:`train.groups`'s schedule; every
                EnvRunner's episode count must be a multiple of it).
        """
        super().training(**kwargs)
        for k, v in dict(num_episodes_per_train_batch=num_episodes_per_train_batch, baseline=baseline,
                         normalize_advantages=normalize_advantages, entropy_coeff=entropy_coeff,
                         vf_loss_coeff=vf_loss_coeff, floor_coeff=floor_coeff, curriculum=curriculum,
                         group_size=group_size).items():
            if v is not NotProvided:
                setattr(self, k, v)
        return self

    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        if self.baseline not in BASELINES:
            raise ValueError(f"ReinforceConfig: baseline must be one of {', '.join(BASELINES)}, got '{self.baseline}'")
        if int(self.group_size) < 1:
            raise ValueError(f"ReinforceConfig: group_size must be >= 1, got {self.group_size}")
        if self.baseline in GROUP_BASELINES and self.group_size < 2:
            raise ValueError(f"ReinforceConfig: baseline '{self.baseline}' compares each rollout with the other "
                             f"rollouts of its question: set group_size >= 2, got {self.group_size}")
        per_runner = math.ceil(self.num_episodes_per_train_batch / max(1, self.num_env_runners))
        if self.group_size > 1 and (per_runner * max(1, self.num_env_runners) != self.num_episodes_per_train_batch
                                    or per_runner % self.group_size):
            raise ValueError(f"ReinforceConfig: num_episodes_per_train_batch ({self.num_episodes_per_train_batch}) "
                             f"must be a multiple of group_size × num_env_runners ({self.group_size} × "
                             f"{max(1, self.num_env_runners)}): every EnvRunner samples whole groups")

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from policies.rl.module import KairosRLModule

        return RLModuleSpec(module_class=KairosRLModule, model_config={})

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        return ReinforceTorchLearner


#: sampling attempts of one iteration when EnvRunners die during it; how long to wait for their restart
SAMPLE_ATTEMPTS = 3
RESTART_TIMEOUT_S = 300.0


class Reinforce(Algorithm):
    """REINFORCE: sample complete episodes, one gradient step on them, sync weights."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> ReinforceConfig:
        return ReinforceConfig()

    @override(Algorithm)
    def training_step(self) -> None:
        weights = self._prepare_runners()
        for k, v in weights.items():
            self.metrics.log_value(("curriculum", f"lambda_{k}"), v, window=1)

        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, env_runner_results = self._sample_episodes()
        self.metrics.aggregate(env_runner_results, key=ENV_RUNNER_RESULTS)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            learner_results = self.learner_group.update(
                episodes=episodes,
                timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                    (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME))},
            )
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group,
                                               inference_only=True)

    def _prepare_runners(self) -> dict[str, float]:
        """Seed every EnvRunner for this iteration and give it the curriculum's λ; returns the λ."""
        if self.config.seed is not None:  # iteration k samples from RNGs seeded by (seed, k, runner): resumable
            seed, it = int(self.config.seed), int(self.iteration)
            self.env_runner_group.foreach_env_runner(lambda r: reseed_env_runner(r, seed, it), local_env_runner=True)
        curriculum = Curriculum(self.config.curriculum)
        weights, ranges = curriculum.weights(self.iteration), curriculum.ranges(self.iteration)
        if weights:
            apply_cost_weights(self.env_runner_group, weights)
        if ranges:  # a cost-conditioned policy: each episode draws its λ from [scheduled λ, high]
            apply_cost_weights(self.env_runner_group, ranges, method="set_cost_ranges")
        return {**weights, **{f"{k}_low": lo for k, (lo, _) in ranges.items()}}

    def _sample_episodes(self) -> tuple[list, list]:
        """Complete episodes from every EnvRunner (in parallel), and the runners' metrics.

        An EnvRunner that dies while sampling (its process killed, its node lost) returns nothing: RLlib restarts
        it; the iteration's sampling is then redone on every runner, reseeded as before — the iteration's episodes
        are a pure function of (weights, seed, iteration), so the rerun yields what an uninterrupted run would have
        (the survivors' episodes come from the trajectory cache) and no iteration is lost or counted twice."""
        n_remote = self.env_runner_group.num_remote_workers()
        per_runner = math.ceil(self.config.num_episodes_per_train_batch / max(1, n_remote))
        g = int(self.config.group_size)
        if g > 1:  # each runner: per_runner / g questions of a seeded, disjoint draw, each g times (train.groups)
            draw = [int(self.config.seed), int(self.iteration)] if self.config.seed is not None else \
                int(np.random.SeedSequence().entropy % 2**63)
            slots = max(1, n_remote)
            sample = lambda r: sample_groups(r, per_runner, g, draw, slots)  # noqa: E731
        else:
            sample = lambda r: (r.sample(num_episodes=per_runner, explore=True), r.get_metrics())  # noqa: E731
        for attempt in range(SAMPLE_ATTEMPTS):
            sampled = self.env_runner_group.foreach_env_runner(sample, local_env_runner=n_remote <= 0)
            errors = [s for s in sampled if isinstance(s, str)]
            if errors:
                raise ValueError(errors[0])
            sampled = [s for s in sampled if s is not None]
            if n_remote <= 0 or len(sampled) == n_remote:
                break
            log.warning("iteration %d: %d of %d EnvRunners returned no sample (died?); restarting them and sampling "
                        "the iteration again (attempt %d of %d)", self.iteration + 1, n_remote - len(sampled),
                        n_remote, attempt + 2, SAMPLE_ATTEMPTS)
            self._restart_failed_runners()
        else:
            raise RuntimeError(f"iteration {self.iteration + 1}: EnvRunners kept failing while sampling "
                               f"({SAMPLE_ATTEMPTS} attempts); see their logs")
        episodes = tree.flatten([s[0] for s in sampled])
        return [e for e in episodes if e.is_done], [s[1] for s in sampled]

    def _restart_failed_runners(self) -> None:
        """Wait until RLlib has restarted every failed EnvRunner, give them the current weights, seeds and λ."""
        import time

        group = self.env_runner_group
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while group.num_healthy_remote_workers() < group.num_remote_workers():
            self.restore_env_runners(group)
            if time.monotonic() > deadline:
                raise RuntimeError(f"EnvRunners not restarted within {RESTART_TIMEOUT_S:.0f} s "
                                   f"({group.num_healthy_remote_workers()} of {group.num_remote_workers()} healthy)")
            time.sleep(0.5)
        group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)
        self._prepare_runners()


def reseed_env_runner(runner: Any, seed: int, iteration: int) -> None:
    """Seed an EnvRunner's sampling for one iteration from ``(seed, iteration, runner index)``: the question draws
    (RLlib resets the envs with ``runner._seed`` at every ``sample(num_episodes=…)``) and the action sampling
    (torch, numpy, random). Iteration k's episodes are then a pure function of the weights at k and these numbers,
    so a run resumed from a checkpoint (weights + optimizer state) samples exactly what the uninterrupted run did —
    no RNG state to carry — and every iteration draws new questions (with one fixed seed, RLlib would redraw the
    same questions each iteration)."""
    import random

    import numpy as np

    state = np.random.SeedSequence([int(seed), int(iteration), int(runner.worker_index or 0)]).generate_state(2)
    runner._seed = int(state[0] % (2**31 - 1))
    torch.manual_seed(int(state[1]))
    np.random.seed(int(state[1]))
    random.seed(int(state[1]))


class ComputeGroupAdvantages(ConnectorV2):
    """Learner connector of the group baselines: every time step of an episode gets its episode's group advantage
    (:func:`train.groups.group_advantages` of the batch's episode returns, grouped by question) in the
    ``advantages`` column."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, kind: str):
        super().__init__(input_observation_space, input_action_space)
        self.kind = kind

    @override(ConnectorV2)
    def __call__(self, *, rl_module, episodes, batch, **kwargs):
        eps = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        adv = group_advantages([float(np.sum(e.get_rewards())) for e in eps], [episode_group(e) for e in eps],
                               self.kind)
        for e, a in zip(eps, adv):
            self.add_n_batch_items(batch=batch, column=Columns.ADVANTAGES,
                                   items_to_add=np.full(len(e), a, dtype=np.float32), num_items=len(e),
                                   single_agent_episode=e)
        return batch


class ReinforceTorchLearner(TorchLearner):
    """Returns-to-go (γ = 1) → :func:`reinforce_loss`."""

    @override(TorchLearner)
    def build(self) -> None:
        torch.set_num_threads(1)
        super().build()
        if self.config.add_default_connectors_to_learner_pipeline:
            self._learner_connector.prepend(ComputeReturnsToGo(gamma=self.config.gamma))
            if self.config.baseline in GROUP_BASELINES:
                self._learner_connector.prepend(ComputeGroupAdvantages(kind=self.config.baseline))

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch: dict[str, Any],
                                fwd_out: dict[str, torch.Tensor]) -> torch.Tensor:
        module = self.module[module_id]
        dist = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
        out = reinforce_loss(
            dist.logp(batch[Columns.ACTIONS]), dist.entropy(), batch[Columns.RETURNS_TO_GO],
            fwd_out.get(Columns.VF_PREDS), baseline=config.baseline,
            normalize_advantages=config.normalize_advantages, entropy_coeff=config.entropy_coeff,
            vf_loss_coeff=config.vf_loss_coeff, retrieve_logp=dist.retrieve.logits[..., 1],
            floor=float(getattr(module, "explore_floor", 0.0)), floor_coeff=config.floor_coeff,
            advantages=batch.get(Columns.ADVANTAGES),
        )
        stats = {k: v.detach() for k, v in out.items()}
        stats["retrieve_prob"] = dist.retrieve_prob().mean().detach()
        stats["return_to_go_mean"] = batch[Columns.RETURNS_TO_GO].float().mean()
        for k, v in stats.items():
            self.metrics.log_value((module_id, k), v, window=1)
        return out["total_loss"]


class KairosMetricsCallback(RLlibCallback):
    """Logs per episode: answer quality, retrievals, each raw cost (summed) and its λ, episode length."""

    @override(RLlibCallback)
    def on_episode_end(self, *, episode, metrics_logger=None, **kwargs) -> None:
        if metrics_logger is None:
            return
        infos = episode.get_infos()
        last = infos[-1] if len(infos) else {}
        if "quality" in last:
            metrics_logger.log_value("quality", float(last["quality"]), reduce="mean")
        if "retrievals" in last:
            metrics_logger.log_value("retrievals", float(last["retrievals"]), reduce="mean")
        totals: dict[str, float] = {}
        for info in infos[1:]:
            for k, v in (info.get("costs") or {}).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        for k, v in totals.items():
            metrics_logger.log_value(f"cost_{k}", v, reduce="mean")
        for k, v in (last.get("cost_weights") or {}).items():
            metrics_logger.log_value(f"lambda_{k}", float(v), reduce="mean")
