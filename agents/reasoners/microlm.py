"""The micro-world LM: a small transformers Llama-architecture causal LM over a word-level vocabulary."""

from __future__ import annotations

import logging

import torch

from envs.core.microworld.config import ModelConfig

log = logging.getLogger(__name__)


def build_model(cfg: ModelConfig, vocab_size: int, pad_id: int, eos_id: int, attn: str = "sdpa"):
    """A freshly initialised ``LlamaForCausalLM`` of the configured size (tied embeddings, no dropout)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if cfg.hidden % cfg.heads:
        raise ValueError(f"ModelConfig: hidden={cfg.hidden} is not divisible by heads={cfg.heads}")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.max_positions,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
        attention_dropout=0.0,
        attn_implementation=attn,
    )
    model = LlamaForCausalLM(config)
    return model


def n_params(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
