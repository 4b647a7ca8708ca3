"""The Gymnasium ids Kairos registers, and their registration without importing gymnasium early.

``import envs`` calls :func:`register_when_gymnasium_loads`: the ids are registered at once if gymnasium is already
imported, else right after its own import finishes — so importing the foundation (``envs.core``) stays free of
gymnasium. Standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

#: the Gymnasium ids Kairos registers: id -> make_env keyword arguments
GYM_IDS: dict[str, dict[str, Any]] = {
    "kairos/RetrievalTiming-v0": {},
    "kairos/MicroWorld-v0": {"preset": "microworld"},
    "kairos/HotpotQA-v0": {"preset": "hotpotqa"},
}


def register_gym_ids() -> None:
    """Register :data:`GYM_IDS` with Gymnasium (idempotent)."""
    import gymnasium as gym

    for env_id, kwargs in GYM_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="envs.registration:make_env", kwargs=kwargs, disable_env_checker=True)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``gymnasium`` is imported, wraps its loader so that :func:`register_gym_ids`
    runs right after gymnasium's own module code, then removes itself."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "gymnasium":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps the lookup below from finding this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            register_gym_ids()

        spec.loader.exec_module = exec_then_register
        return spec


def register_when_gymnasium_loads() -> None:
    """Register the Kairos ids now if gymnasium is imported, else as soon as it is (``import envs`` stays free of
    gymnasium, so ``import envs.core`` is cheap)."""
    if "gymnasium" in sys.modules:
        register_gym_ids()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
