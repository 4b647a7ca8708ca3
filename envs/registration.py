"""Factories behind the registered Gymnasium ids."""

from __future__ import annotations

from typing import Any

from envs.env_config import EnvConfig

PRESETS: dict[str, dict[str, Any]] = {
    "microworld": {"task": "microworld", "reasoner": "micro", "retriever": "bm25"},
    "hotpotqa": {"task": "hotpotqa", "reasoner": "hf", "retriever": "bm25", "split": "dev"},
}


def make_env(preset: str | None = None, config: EnvConfig | dict | None = None, **kwargs: Any):
    """Build a :class:`~envs.retrieval_env.RetrievalTimingEnv` from a preset plus overrides."""
    from envs.retrieval_env import RetrievalTimingEnv

    if preset and preset not in PRESETS:
        raise ValueError(f"unknown preset '{preset}' (valid: {', '.join(PRESETS)})")
    base = dict(PRESETS[preset]) if preset else {}
    if isinstance(config, EnvConfig):
        config = config.to_dict()
    merged = {**base, **(config or {})}
    return RetrievalTimingEnv(EnvConfig.from_dict(merged), **kwargs)

