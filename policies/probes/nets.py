"""The probe networks: an MLP (PUlSE, RSUS proxy) and ReProbe's small transformer encoder over layers."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class MLP(nn.Module):
    """``in → hidden[0] → hidden[1] → … → 1`` with ReLU (PUlSE: 128 → 64 → 1); outputs a logit."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...] | list[int] = (128, 64), dropout: float = 0.0):
        super().__init__()
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


class ReProbeNet(nn.Module):
    """One token per layer (the last-token state of each of the ``L+1`` rows) → transformer encoder → logit.

    No positional (layer-order) embedding by default: ReProbe is "a hidden-state probe without layer
    order"; ``layer_embedding=True`` adds a learned one (ablation). A learned ``[CLS]`` token is read out.
    """

    def __init__(self, n_tokens: int, d_in: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 d_ff: int = 128, dropout: float = 0.0, layer_embedding: bool = False):
        super().__init__()
        self.n_tokens, self.d_in = n_tokens, d_in
        self.proj = nn.Linear(d_in, d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos = nn.Parameter(torch.zeros(1, n_tokens, d_model)) if layer_embedding else None
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.proj(x.reshape(x.shape[0], self.n_tokens, self.d_in))
        if self.pos is not None:
            t = t + self.pos
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        return self.head(self.norm(self.encoder(t)[:, 0])).squeeze(-1)


def build_net(arch: dict[str, Any]) -> nn.Module:
    """Instantiate a network from its saved architecture dict (``{"type": "mlp" | "reprobe", ...}``)."""
    kw = {k: v for k, v in arch.items() if k != "type"}
    if arch.get("type") == "mlp":
        return MLP(**kw)
    if arch.get("type") == "reprobe":
        return ReProbeNet(**kw)
    raise ValueError(f"unknown probe network type {arch.get('type')!r} (valid: mlp, reprobe)")
