"""The vllm reasoner's configuration and errors, without an engine (fast; runs where vLLM is not installed too)."""

from __future__ import annotations

import pytest

from envs.core.config import ConfigError


def test_config_checks_name_the_fix():
    from agents.reasoners.vllm import VLLMReasonerConfig

    with pytest.raises(ConfigError, match="dtype"):
        VLLMReasonerConfig.from_dict({"dtype": "float8"})
    with pytest.raises(ConfigError, match="tensor parallelism splits: set capture_hidden: false"):
        VLLMReasonerConfig.from_dict({"tensor_parallel_size": 2})
    assert VLLMReasonerConfig.from_dict({"tensor_parallel_size": 2, "capture_hidden": False}).tensor_parallel_size == 2
    with pytest.raises(ConfigError, match="capture_layers"):
        VLLMReasonerConfig.from_dict({"capture_layers": []})
    with pytest.raises(ConfigError, match="unknown config key 'max_batch'"):
        VLLMReasonerConfig.from_dict({"max_batch": 8})  # vLLM's scheduler batches: max_num_seqs


def test_the_env_validates_vllm_options_on_the_driver():
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="kv_cache_gb"):
        EnvConfig.from_dict({"task": "hotpotqa", "reasoner": "vllm", "reasoner_options": {"kv_cache_gb": 2}})


def test_a_missing_vllm_install_is_a_clear_error(monkeypatch):
    from agents.reasoners import vllm_engine
    from agents.reasoners.registry import make_reasoner

    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: "vLLM is not installed (CPU: python scripts/install_vllm.py)")
    with pytest.raises(ImportError, match="reasoner 'vllm': vLLM is not installed .*install_vllm.py"):
        make_reasoner("vllm")


def test_a_missing_model_names_what_was_tried(monkeypatch, tmp_path):
    from agents.reasoners import vllm_engine
    from agents.reasoners.models import ModelNotFoundError
    from agents.reasoners.registry import make_reasoner

    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="model 'Org/Not-Here' not found; tried: .*Hugging Face cache"):
        make_reasoner("vllm", model="Org/Not-Here")


def test_pooling_with_some_rows_captured_leaves_the_missing_transitions_nan():
    """``capture_layers`` captures some rows only: the pooled states have NaN rows there, and each token's layer
    transitions (PUlSE's per-token poolings) are NaN where a row is missing, the captured pairs' exact."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    from agents.reasoners.vllm import VLLMReasoner
    from agents.signals.hidden import transitions

    fake = SimpleNamespace(engine=SimpleNamespace(rows=[0, 2, 3]), n_layers=3)
    hidden = torch.arange(4 * 3 * 2, dtype=torch.float32).reshape(4, 3, 2) + 1.0  # [positions, captured rows, d]
    hm, hl, hf, tt = VLLMReasoner._pool(fake, hidden, 1, 4)
    assert hm.shape == (4, 2) and np.isnan(hm[1]).all() and not np.isnan(hm[[0, 2, 3]]).any()
    assert tt.shape == (3, 2, 3)  # 3 content positions, (m, theta), 3 transitions
    assert np.isnan(tt[:, :, :2]).all()  # 0 -> 1 and 1 -> 2 need the missing row 1
    m, theta = transitions(hidden[1:, 1:].numpy())  # rows 2 -> 3
    np.testing.assert_allclose(tt[:, 0, 2], m[:, 0], rtol=1e-6)
    np.testing.assert_allclose(tt[:, 1, 2], theta[:, 0], atol=1e-6)
    assert VLLMReasoner._pool(fake, hidden, 4, 4)[3] is None  # no content token: no transitions
