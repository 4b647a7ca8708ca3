"""Shared fixtures: single-threaded torch, a tiny micro-world, the shared data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO / "configs" / "microworld_tiny.yaml"
SHARED_DATA = Path(os.environ.get("KAIROS_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """A tiny micro-world trained for a few steps (exercises the build path; not competent)."""
    from envs.core.microworld.config import BuildConfig
    from envs.microworld.build import train_world

    cfg = BuildConfig.from_yaml(TINY_CONFIG)
    out = tmp_path_factory.mktemp("tiny_world")
    return train_world(cfg, out, progress=False)


@pytest.fixture(scope="module")
def ray_local():
    """A private local Ray instance for one test module (``address="local"``: never another cluster on this host)."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()
