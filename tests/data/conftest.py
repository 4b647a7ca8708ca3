"""Shared helpers for the data-layer tests: fixture files and the (optional) shared real data."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.core.data.loaders import shared_data_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    """``tests/fixtures``: small files written from the published schemas."""
    return FIXTURES


@pytest.fixture
def real_file():
    """Return a function mapping a path under the shared data dir to a Path, skipping when it is absent."""

    def get(rel: str) -> Path:
        path = shared_data_dir() / rel
        if not path.is_file():
            pytest.skip(f"shared real data not available: {path} (set KAIROS_SHARED_DATA to its directory)")
        return path

    return get
