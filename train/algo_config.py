"""The RLlib side of a run's config: the :class:`train.reinforce.ReinforceConfig` built from a :class:`TrainConfig`
(:func:`build_algo_config`), the RLModule's ``model_config`` (:func:`build_model_config`) and what every EnvRunner's
env factory gets (:func:`runner_env_config`).
"""

from __future__ import annotations

from typing import Any

from train.config import TrainConfig

ENV_NAME = "kairos_train_env"  # registered with ray.tune to train.env_factory.make_env


def runner_env_config(cfg: TrainConfig, services: dict | None = None) -> dict[str, Any]:
    """What every EnvRunner's env factory gets (:func:`train.env_factory.make_env`): the run's env config as it
    crosses the process boundary (``to_dict()``; a preset's already applied here, on the driver), the env to build
    (``_env``) and the specs of the running ``services``."""
    return {**cfg.env_config.to_dict(), "_env": cfg.env, **(services or {})}


def build_algo_config(cfg: TrainConfig, services: dict | None = None):
    """The :class:`train.reinforce.ReinforceConfig` of a run (``services``: env-config keys naming running
    services the EnvRunners' envs connect to — ``reasoner_service``, ``retriever_service``, ``cache_service``)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    from policies.rl.module import KairosRLModule
    from train.env_factory import make_env
    from train.reinforce import KairosMetricsCallback, ReinforceConfig

    a = cfg.algo
    register_env(ENV_NAME, make_env)
    model_config = build_model_config(cfg)
    return (
        ReinforceConfig()
        .environment(env=ENV_NAME, env_config=runner_env_config(cfg, services))
        .env_runners(num_env_runners=cfg.num_env_runners, num_envs_per_env_runner=cfg.num_envs_per_env_runner,
                     gym_env_vectorize_mode="vector_entry_point", batch_mode="complete_episodes",
                     num_cpus_per_env_runner=1, num_gpus_per_env_runner=cfg.num_gpus_per_env_runner,
                     rollout_fragment_length="auto")
        .learners(num_learners=0)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=KairosRLModule, model_config=model_config))
        .training(lr=a.lr, grad_clip=a.grad_clip, grad_clip_by="global_norm", gamma=1.0,
                  num_episodes_per_train_batch=a.episodes_per_batch, baseline=a.baseline,
                  normalize_advantages=a.normalize_advantages, entropy_coeff=a.entropy_coeff,
                  vf_loss_coeff=a.vf_loss_coeff, floor_coeff=a.floor_coeff, group_size=a.group_size,
                  curriculum={k: s.to_dict() for k, s in cfg.curriculum.items()})
        .callbacks(KairosMetricsCallback)
        .debugging(seed=cfg.seed, log_level="WARN")
        .reporting(metrics_num_episodes_for_smoothing=a.episodes_per_batch)
    )

def build_model_config(cfg: TrainConfig) -> dict[str, Any]:
    """The RLModule's ``model_config`` of a run."""
    m = cfg.model
    return {"arch": m.arch, "d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads,
            "ff_dim": m.ff_dim, "normalize": m.normalize,
            "explore_floor": m.explore_floor, "explore_mix": m.explore_mix, "freeze": list(m.freeze),
            "drop_fields": list(m.drop_fields), "content_dim": m.content_dim,
            "query_modes": _query_modes(cfg)}


def _query_modes(cfg: TrainConfig) -> list[str]:
    """The env's query modes (the names of the query head's outputs): a preset env's ``query_modes`` — its default
    too — or a custom factory's ``query_modes`` setting ([] without one)."""
    from envs.env_config import EnvConfig

    env = cfg.env_config
    return list(env.query_modes) if isinstance(env, EnvConfig) else list(env.to_dict().get("query_modes", []))
