"""Factories behind the registered Gymnasium ids."""

from __future__ import annotations

from typing import Any

from envs.env_config import PRESETS, EnvConfig

__all__ = ["PRESETS", "make_env"]


def make_env(preset: str | None = None, config: EnvConfig | dict | None = None, **kwargs: Any):
    """Build a :class:`~envs.retrieval_env.RetrievalTimingEnv`: an :class:`EnvConfig` as it is, or a preset with a
    dict of overrides (:meth:`EnvConfig.from_preset`)."""
    from envs.retrieval_env import RetrievalTimingEnv

    if isinstance(config, EnvConfig):
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown preset '{preset}' (valid: {', '.join(PRESETS)})")
        return RetrievalTimingEnv(config, **kwargs)
    return RetrievalTimingEnv(EnvConfig.from_preset(preset, config), **kwargs)
