"""The env factory RLlib calls on every EnvRunner (``config.environment(env=make_env, env_config=…)``).

``env_config["_env"]`` picks the env: a preset — ``microworld`` (``kairos/MicroWorld-v0``) or ``hotpotqa``
(``kairos/HotpotQA-v0``, SmolLM2-135M) — whose :class:`~envs.env_config.EnvConfig` the driver built (the preset
applied there, :func:`train.algo_config.runner_env_config`) and sent as ``to_dict()``; it is rebuilt here and vectorised
with :func:`envs.vector.make_batched`, which batches generation across copies and shares one model and cache; or
``package.module:factory`` (``factory(config) -> gym.Env``; vectorised with ``SyncVectorEnv``).
RLlib passes ``num_envs`` in the context when it wants a vector env (``gym_env_vectorize_mode=
"vector_entry_point"``).
"""

from __future__ import annotations

import importlib
from typing import Any


def _load(spec: str):
    mod, fn = spec.split(":")
    return getattr(importlib.import_module(mod), fn)


def make_env(ctx: dict[str, Any]):
    """A single env (no ``num_envs`` in ``ctx``) or a vector env of ``ctx["num_envs"]`` copies."""
    import torch

    torch.set_num_threads(1)
    ctx = dict(ctx)
    n = ctx.pop("num_envs", None)
    target = ctx.pop("_env", "microworld")
    from envs.env_config import PRESETS

    if target in PRESETS:
        from envs.env_config import EnvConfig

        config = EnvConfig.from_dict(ctx)  # the driver's EnvConfig (its preset applied there), across the boundary
        if n is None:
            from envs.retrieval_env import RetrievalTimingEnv

            return RetrievalTimingEnv(config)
        from envs.vector import make_batched

        return make_batched(int(n), config)
    factory = _load(target)
    if n is None:
        return factory(ctx)
    import gymnasium as gym

    return gym.vector.SyncVectorEnv([lambda: factory(ctx) for _ in range(int(n))])
