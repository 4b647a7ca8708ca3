"""Typed configuration of a training run (YAML-loadable; every field has help text; unknown keys are errors).

The env is typed: ``env_config`` loads into an :class:`~envs.env_config.EnvConfig` with the preset ``env`` names
under it (:meth:`EnvConfig.from_preset`, once, here on the driver), so a typo anywhere in it fails on load, naming
the key path; a custom ``module:factory`` env gets its own settings as given (:class:`FactoryEnvConfig`).

Example:
    >>> cfg = TrainConfig.from_dict({"iterations": 3, "algo": {"baseline": "mean"}})
    >>> cfg.algo.baseline, cfg.curriculum["retrieval_calls"].start
    ('mean', 0.5)
    >>> cfg.env_config.task, cfg.env_config.max_questions
    ('microworld', 256)
    >>> TrainConfig.from_dict({"env": "hotpotqa", "env_config": {"split": "dev[0:8]"}}).env_config.reasoner
    'hf'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envs.core.config import ConfigBase, ConfigError, config_mapping, helpf
from envs.core.plugins import import_plugins
from envs.env_config import PRESETS, EnvConfig
from envs.serving import ReasonerServiceConfig, RetrieverServiceConfig
from train.curriculum import ScheduleConfig
from train.groups import GROUP_BASELINES
from train.warmstart import WarmStartOptions

BASELINES = ("none", "mean", "value", *GROUP_BASELINES)

#: TrainConfig keys (dotted) that may change when a run is resumed: its length, saving schedule and resources —
#: nothing that changes what an iteration computes (every other key's change is refused, naming it)
RESUME_FREE_KEYS = ("name", "out_dir", "iterations", "checkpoint_every", "keep_checkpoints", "eval_questions",
                    "snapshot_every", "snapshot_from", "num_cpus", "num_env_runners", "num_envs_per_env_runner",
                    "num_gpus_per_env_runner", "sweep", "cache_service", "reasoner_service", "retriever_service",
                    "env_config.cache_path", "env_config.cache_service", "env_config.reasoner_service",
                    "env_config.retriever_service")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


#: keys added after runs were recorded, with the value every run before them computed with: a run's config.json
#: without one of them is read as having it (resuming such a run with that value is no change)
ADDED_KEYS = {"warmstart.dtype": "float32", "warmstart.horizon": None}


def resume_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` of every dotted key whose value differs between a run's recorded config
    (``config.json``) and the config it is resumed with, except :data:`RESUME_FREE_KEYS` (and the keys below
    them). A key only one side has counts as changed (``<unset>`` on the other), but for :data:`ADDED_KEYS` (read as
    their value on a side whose section lacks them)."""
    a, b = _flatten(old), _flatten(new)
    a = {**{k: v for k, v in ADDED_KEYS.items() if isinstance(old.get(k.split(".")[0]), dict)}, **a}
    b = {**{k: v for k, v in ADDED_KEYS.items() if isinstance(new.get(k.split(".")[0]), dict)}, **b}
    free = tuple(RESUME_FREE_KEYS)
    out = []
    for k in sorted(set(a) | set(b)):
        if any(k == f or k.startswith(f + ".") for f in free):
            continue
        va, vb = a.get(k, "<unset>"), b.get(k, "<unset>")
        if va != vb:
            out.append((k, va, vb))
    return out

#: ``TrainConfig.env_config`` when a config gives none (over the preset ``env`` names)
DEFAULT_ENV_CONFIG: dict[str, Any] = {"split": "train", "max_questions": 256, "rsus_components": ["ent"],
                                      "cache_path": "runs/train/cache.sqlite"}


@dataclass
class FactoryEnvConfig(ConfigBase):
    """The settings of a custom env factory (``TrainConfig.env: 'package.module:factory'``): the ``env_config``
    mapping as given — the factory's own, not Kairos' (``factory(config)`` gets it on every EnvRunner)."""

    options: dict[str, Any] = helpf({}, "the factory's settings")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str | None = None) -> FactoryEnvConfig:
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{where or cls.__name__}: env_config must be a mapping, got {data!r}")
        return cls(options=dict(data or {}))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass
class AlgoOptions(ConfigBase):
    """REINFORCE hyper-parameters."""

    lr: float = helpf(3e-3, "Adam learning rate", gt=0)
    baseline: str = helpf("value", "baseline subtracted from the returns-to-go: none | mean (of the batch) | value "
                                   "(the learned value head) | rloo (each episode's return minus the mean return of "
                                   "the other group_size − 1 rollouts of its question) | grpo (the return minus its "
                                   "question's group mean, over the group's std); rloo and grpo need group_size >= 2")
    normalize_advantages: bool = helpf(True, "divide advantages by their batch std (centering is the baseline's job)")
    entropy_coeff: float = helpf(0.01, "entropy bonus weight", ge=0)
    vf_loss_coeff: float = helpf(0.5, "weight of the value-head MSE (baseline=value)", ge=0)
    floor_coeff: float = helpf(1.0, "weight of the barrier keeping π(retrieve) >= model.explore_floor", ge=0)
    grad_clip: float | None = helpf(1.0, "global gradient-norm clip (null: off)", gt=0)
    episodes_per_batch: int = helpf(64, "complete episodes per training iteration", ge=1)
    group_size: int = helpf(1, "rollouts of each question per batch, sampled side by side with independent actions "
                               "(1: every episode draws its own question); episodes_per_batch / group_size questions "
                               "per iteration", ge=1)

    def validate(self) -> None:
        if self.baseline not in BASELINES:
            raise ConfigError(f"AlgoOptions: baseline must be one of {BASELINES}, got '{self.baseline}'")
        if self.baseline in GROUP_BASELINES and self.group_size < 2:
            raise ConfigError(f"AlgoOptions: baseline '{self.baseline}' compares each rollout with the other rollouts "
                              f"of its question, and group_size is {self.group_size}: set algo.group_size >= 2 "
                              "(e.g. 4)")


@dataclass
class ModelOptions(ConfigBase):
    """The policy RLModule (:mod:`policies.rl`)."""

    arch: str = helpf("transformer", "encoder over field tokens: transformer | mlp")
    d_model: int = helpf(32, "token width", ge=1)
    n_layers: int = helpf(1, "transformer layers", ge=1)
    n_heads: int = helpf(2, "attention heads", ge=1)
    ff_dim: int = helpf(64, "feed-forward width", ge=1)
    normalize: bool = helpf(True, "standardise each observation dimension with running statistics (learner-updated)")
    explore_floor: float = helpf(0.05, "anti-collapse: a loss barrier keeps π(retrieve) >= this on visited states")
    explore_mix: float = helpf(0.0, "optional ε-mix of the sampling policy with uniform (learner uses the raw one)")
    freeze: list[str] = helpf([], "parameter groups to freeze: trunk, retrieve, query, value")
    drop_fields: list[str] = helpf([], "observation fields the policy does not see (ablations), e.g. [pulse]")
    warm_start: str | None = helpf(None, "exported policy directory to initialise from (policies.rl.export)")
    content_dim: int = helpf(16, "PCA width of each content embedding field (*_embedding), fitted on training "
                                 "observations and saved with the policy (0: feed the raw embedding)")

    def validate(self) -> None:
        if self.arch not in ("transformer", "mlp"):
            raise ConfigError(f"ModelOptions: arch must be transformer or mlp, got '{self.arch}'")
        if not 0 <= self.explore_mix < 0.5:
            raise ConfigError(f"ModelOptions: explore_mix must be in [0, 0.5), got {self.explore_mix}")
        if not 0 <= self.explore_floor < 0.5:
            raise ConfigError(f"ModelOptions: explore_floor must be in [0, 0.5), got {self.explore_floor}")
        if self.content_dim < 0:
            raise ConfigError(f"ModelOptions: content_dim must be >= 0, got {self.content_dim}")
        if self.arch == "transformer" and self.d_model % self.n_heads:
            raise ConfigError(f"ModelOptions: d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads}) "
                              "for the transformer's attention heads")
        bad = [g for g in self.freeze if g not in ("trunk", "retrieve", "query", "value")]
        if bad:
            raise ConfigError(f"ModelOptions: unknown freeze group '{bad[0]}' (valid: trunk, retrieve, query, value)")


@dataclass
class SweepOptions(ConfigBase):
    """A Ray Tune grid over seeds and the final λ (``python -m train --config … --sweep``)."""

    seeds: list[int] = helpf([], "seeds to run (empty: the run's own seed)")
    lambda_end: list[float] = helpf([], "final λ of the retrieval_calls schedule to run (empty: the config's)")
    max_concurrent: int = helpf(1, "trials at once (each needs 2 CPUs: the trial driver and its EnvRunner)")

    def validate(self) -> None:
        if self.max_concurrent < 1:
            raise ConfigError("SweepOptions: max_concurrent must be >= 1")
        if any(v < 0 for v in self.lambda_end):
            raise ConfigError("SweepOptions: lambda_end values must be >= 0")


@dataclass
class TrainConfig(ConfigBase):
    """One training run (``python -m train --config configs/experiments/microworld/train_microworld.yaml``)."""

    name: str = helpf("microworld", "run name (TensorBoard tag prefix, exported policy name)")
    out_dir: str = helpf("runs/train/microworld", "run directory: checkpoints/, tb/, metrics.jsonl, policy/")
    plugins: list[str] = helpf([], "plug-in modules imported first (on the driver; a user's signal, trigger, cost, "
                                   "retriever … registers on import, then its name is valid anywhere in this config); "
                                   "the env carries them to every EnvRunner, warm-start worker and service (env_config.plugins)")
    iterations: int = helpf(40, "training iterations (one batch of complete episodes each); 0: no REINFORCE, the "
                                "warm start (warmstart or model.warm_start) is exported as the run's policy", ge=0)
    seed: int = helpf(0, "seed of RLlib, torch and the env runners")
    num_cpus: int = helpf(2, "CPUs for a local Ray (ignored when connecting to a running cluster)", ge=1)
    num_env_runners: int = helpf(1, "remote EnvRunner actors (0: sample in the driver)", ge=0)
    num_gpus_per_env_runner: float = helpf(0.0, "GPUs per EnvRunner (the reasoner lives there: > 0 places "
                                                 "runners on GPU nodes of a cluster)", ge=0)
    num_envs_per_env_runner: int = helpf(8, "env copies per runner (batched generation for the micro-world)", ge=1)
    env: str = helpf("microworld", "'microworld' (kairos/MicroWorld-v0), 'hotpotqa' (kairos/HotpotQA-v0) or "
                     "'package.module:factory(config)'")
    env_config: EnvConfig | FactoryEnvConfig = field(
        default_factory=lambda: EnvConfig.from_preset("microworld", DEFAULT_ENV_CONFIG),
        metadata={"help": "env config: EnvConfig fields over the preset 'env' names (default: {split: train, "
                          "max_questions: 256, rsus_components: [ent], cache_path: runs/train/cache.sqlite}); a "
                          "custom 'module:factory' gets its own settings as given"})
    algo: AlgoOptions = field(default_factory=AlgoOptions, metadata={"help": "REINFORCE options"})
    model: ModelOptions = field(default_factory=ModelOptions, metadata={"help": "policy module options"})
    curriculum: dict[str, ScheduleConfig] = field(
        default_factory=lambda: {"retrieval_calls": ScheduleConfig()},
        metadata={"help": "cost name -> λ schedule (applied to every EnvRunner each iteration)"})
    checkpoint_every: int = helpf(5, "save a checkpoint every N iterations (and at the end)", ge=1)
    keep_checkpoints: int = helpf(2, "checkpoints kept on disk (oldest deleted)", ge=1)
    eval_questions: int = helpf(0, "after training, evaluate greedily on this many dev questions (0: skip)", ge=0)
    snapshot_every: int = helpf(0, "export the trigger every N iterations into snapshots/iter_NNNN (0: off) — "
                                   "the benchmark can select among them on dev, as it calibrates thresholds", ge=0)
    snapshot_from: int = helpf(0, "first iteration eligible for a snapshot", ge=0)
    sweep: SweepOptions = field(default_factory=SweepOptions,
                                metadata={"help": "Tune grid over seeds × final λ (used with --sweep)"})
    warmstart: WarmStartOptions = field(default_factory=WarmStartOptions,
                                        metadata={"help": "supervised warm start from counterfactual step labels "
                                                          "(train.warmstart), before REINFORCE"})
    cache_service: bool = helpf(False, "share the trajectory cache across nodes: one Ray actor on the driver's node "
                                       "owns env_config.cache_path and every EnvRunner reads and writes through it "
                                       "(envs.cache_service); false: each EnvRunner opens the SQLite file itself "
                                       "(fine on one machine, never over a network file system)")
    retriever_service: RetrieverServiceConfig | None = field(
        default=None, metadata={"help": "serve the env's retriever from Ray actors (envs.services: "
                                        "replicas, num_cpus, resources); null: every EnvRunner loads the index "
                                        "(a prebuilt BM25 index is memory-mapped: one copy per node)"})
    reasoner_service: ReasonerServiceConfig | None = field(
        default=None, metadata={"help": "one shared, batching reasoner service for every EnvRunner "
                                        "(envs.services: replicas, max_batch, max_wait_ms, num_cpus, "
                                        "num_gpus, resources); null: every EnvRunner builds its own reasoner"})

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str | None = None) -> TrainConfig:
        """As :meth:`ConfigBase.from_dict`, the ``env_config`` mapping loaded over the preset ``env`` names."""
        where = where or cls.__name__
        data = config_mapping(cls, data, where)
        if data.get("plugins"):  # before the env (loaded here, over its preset) checks its names
            import_plugins(data["plugins"], f"{where}.plugins", ConfigError)
        env = data.get("env", "microworld")
        raw = data.get("env_config", DEFAULT_ENV_CONFIG)
        if not isinstance(raw, (EnvConfig, FactoryEnvConfig)):
            if not isinstance(raw, dict):
                raise ConfigError(f"{where}: key 'env_config' must be a mapping, got {raw!r}")
            data["env_config"] = (EnvConfig.from_preset(env, raw, where=f"{where}.env_config")
                                  if isinstance(env, str) and env in PRESETS else FactoryEnvConfig.from_dict(raw))
        return super().from_dict(data, where)

    def replace(self, **changes: Any) -> TrainConfig:
        """Copy with some fields changed; another ``env`` (without a new ``env_config``) keeps the keys this run sets
        over its preset and takes the new preset's for the rest."""
        if changes.get("env", self.env) != self.env and "env_config" not in changes:
            env = self.env_config
            changes["env_config"] = (env.overrides_over(EnvConfig.from_preset(self.env)) if self.env in PRESETS
                                     and isinstance(env, EnvConfig) else env.to_dict())
        return super().replace(**changes)

    @property
    def kairos_env(self) -> EnvConfig:
        """The run's :class:`EnvConfig` (a preset env; a custom factory has none: an error)."""
        if not isinstance(self.env_config, EnvConfig):
            raise ConfigError(f"TrainConfig: env '{self.env}' is a custom env factory, not a Kairos env preset "
                              f"({', '.join(PRESETS)})")
        return self.env_config

    def validate(self) -> None:
        if self.iterations == 0 and not (self.warmstart.enabled or self.model.warm_start):
            raise ConfigError("TrainConfig: iterations 0 trains nothing: it exports the warm start as the policy, and "
                              "this run has none (set warmstart.enabled: true or model.warm_start, or iterations >= 1)")
        if self.env not in PRESETS and ":" not in self.env:
            presets = ", ".join(repr(p) for p in PRESETS)
            raise ConfigError(f"TrainConfig: env must be a preset {presets} or 'module:factory', got '{self.env}'")
        for name, sched in self.curriculum.items():
            for k in ("start", "end"):
                v = float(getattr(sched, k))
                if not (v == v and abs(v) != float("inf")) or v < 0:
                    raise ConfigError(f"TrainConfig: curriculum.{name}.{k} must be a finite λ >= 0, got {v}")
        runners = max(1, self.num_env_runners)
        if self.algo.group_size > 1 and self.algo.episodes_per_batch % (self.algo.group_size * runners):
            g, n = self.algo.group_size, self.algo.episodes_per_batch
            fix = max(g * runners, n - n % (g * runners))
            raise ConfigError(f"TrainConfig: algo.episodes_per_batch ({n}) must be a multiple of algo.group_size × "
                              f"num_env_runners ({g} × {runners} = {g * runners}): every EnvRunner samples whole "
                              f"groups of a question's rollouts — e.g. episodes_per_batch: {fix}")
        if self.warmstart.enabled and self.env not in PRESETS:
            raise ConfigError(f"TrainConfig.warmstart: the counterfactual warm start labels through the Kairos env "
                              f"presets ({', '.join(PRESETS)}), not a custom env factory '{self.env}' (set "
                              "warmstart.enabled: false)")
        if self.cache_service and (self.env not in PRESETS or not getattr(self.env_config, "cache_path", None)):
            raise ConfigError("TrainConfig.cache_service needs an env preset and env_config.cache_path (the SQLite "
                              "file the cache server owns)")
        for svc in ("reasoner_service", "retriever_service"):
            if getattr(self, svc) is not None and self.env not in PRESETS:
                raise ConfigError(f"TrainConfig.{svc}: services are wired into the Kairos env presets "
                                  f"({', '.join(PRESETS)}), not a custom env factory '{self.env}'")
        if (self.env in PRESETS) != isinstance(self.env_config, EnvConfig):
            raise ConfigError(f"TrainConfig.env_config: a preset env ({', '.join(PRESETS)}) takes an EnvConfig, a "
                              f"custom env factory its own settings; got {type(self.env_config).__name__} for "
                              f"env '{self.env}'")
        if isinstance(self.env_config, EnvConfig):  # typed on load (from_dict): a typo failed there, naming the key
            env = self.env_config
            missing = sorted(set(self.curriculum) - set(env.costs))
            if missing:
                raise ConfigError(f"TrainConfig: curriculum for cost '{missing[0]}', which the env does not charge "
                                  f"(env_config.costs: {sorted(env.costs)}); add it to env_config.costs")
            drawn = [k for k, sc in self.curriculum.items() if sc.high is not None]
            blind = [k for k in drawn if k not in env.observe_costs]
            if blind:
                raise ConfigError(f"TrainConfig: curriculum.{blind[0]}.high draws each episode's λ from a range, but "
                                  f"the policy would not see it: add '{blind[0]}' to env_config.observe_costs")
            if drawn and self.warmstart.enabled and self.warmstart.kind != "counterfactual":
                raise ConfigError(f"TrainConfig.warmstart.kind '{self.warmstart.kind}': a cost-conditioned policy "
                                  "(curriculum with high) is warm-started from counterfactual labels only")
