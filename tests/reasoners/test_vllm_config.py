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
