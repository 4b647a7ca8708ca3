"""Factories behind the registered Gymnasium ids."""

from __future__ import annotations

from typing import Any

from envs.env_config import PRESETS, EnvConfig

__all__ = ["PRESETS", "make_env"]


def make_env(preset: str | None = None, config: EnvConfig | dict | None = None, **kwargs: Any):
    """Build a :class:`~envs.retrieval_env.RetrievalTimingEnv`: an :class:`EnvConfig` as it is, or a preset with a
    dict of overrides (:meth:`EnvConfig.from_preset`)."""
    from envs.retrieval_env import RetrievalTimingEnv

    keys = [k for k in kwargs if k not in ("components", "render_mode")]
    if keys:  # an env setting given as a keyword: RetrievalTimingEnv's own TypeError would not say where it goes
        import dataclasses

        from envs.core.config import ConfigError

        fields = {f.name for f in dataclasses.fields(EnvConfig)}
        if keys[0] in fields:
            raise ConfigError(f"make_env: '{keys[0]}' is an env config key, not a keyword of make_env: pass it in "
                              f"config, e.g. make_env({preset!r}, config={{{keys[0]!r}: {kwargs[keys[0]]!r}}})")
        raise TypeError(f"make_env: unknown keyword '{keys[0]}' (make_env takes preset, config, components, "
                        "render_mode; env settings go in config={...})")
    if isinstance(config, EnvConfig):
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown preset '{preset}' (valid: {', '.join(PRESETS)})")
        return RetrievalTimingEnv(config, **kwargs)
    return RetrievalTimingEnv(EnvConfig.from_preset(preset, config), **kwargs)
