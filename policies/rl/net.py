"""The policy network, in plain torch: one token per observation field → transformer encoder (or MLP) → heads.

Every field of the Dict observation (``pulse``, ``output``, ``rsus``, ``history``, ``mask``, …) is squashed
(``sign(x)·log1p|x|``, so unbounded signals stay tame), standardised per dimension with running statistics
(``normalize``; updated by the learner from every training batch, stored as buffers so they travel with the
weights to the env runners and into exports), projected linearly to ``d_model`` and tagged with a learned
field embedding. Standardising matters: step signals such as MinProb live in a sliver of their range
(0.9 vs 0.99 separates wrong from right steps on the micro-world); unscaled, the policy never learned that
boundary. A learned ``[CLS]`` token joins them; the encoder's output at ``[CLS]`` feeds three
heads: ``retrieve`` (2 logits), ``query`` (one logit per QueryGen mode; absent with one mode) and ``value``.

``arch="mlp"`` replaces the encoder by an MLP over the concatenated field tokens (a cheaper baseline).

Large fields (the content embeddings: hundreds of hidden-state numbers) can be ``reduce``-d first: a fixed
PCA projection to ``k`` numbers, fitted once on training observations (:meth:`PolicyNet.fit_reducers`; the
RLModule fits it on the learner's first batch, the supervised warm start on its dataset) and stored as
buffers, so it is saved, exported and synced with the weights. Rows whose field is masked (all zeros) are
left out of the fit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

#: parameter groups that can be frozen (see :meth:`PolicyNet.freeze`)
GROUPS = ("trunk", "retrieve", "query", "value")


@dataclass
class PolicySpec:
    """Shape of a :class:`PolicyNet` (saved as JSON next to an exported state dict)."""

    fields: dict[str, int]                 # observation field -> its (flat) dimension, in token order
    n_modes: int = 1                       # QueryGen modes (1: no query head)
    arch: str = "transformer"              # transformer | mlp
    d_model: int = 32
    n_layers: int = 1
    n_heads: int = 2
    ff_dim: int = 64
    query_modes: list[str] = field(default_factory=list)  # names of the modes (informational)
    normalize: bool = True                 # running per-dimension standardisation of the squashed inputs
    reduce: dict[str, int] = field(default_factory=dict)  # field -> k: fixed PCA projection fitted on training data

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PolicySpec:
        d = dict(d)
        d.setdefault("normalize", False)  # exports written before normalisation existed
        return cls(**d)

    def input_dim(self, name: str) -> int:
        """Width of a field after its reduction (the projection's and normaliser's input)."""
        return min(self.reduce[name], self.fields[name]) if name in self.reduce else self.fields[name]


def squash(x: torch.Tensor) -> torch.Tensor:
    """``sign(x)·log1p(|x|)`` with non-finite values zeroed (robust to unbounded signal ranges)."""
    x = torch.nan_to_num(x.float(), nan=0.0, posinf=1e4, neginf=-1e4)
    return torch.sign(x) * torch.log1p(torch.abs(x))


class PolicyNet(nn.Module):
    """Field tokens → encoder → heads (retrieve, query mode, value). See the module docstring."""

    def __init__(self, spec: PolicySpec):
        super().__init__()
        if spec.arch not in ("transformer", "mlp"):
            raise ValueError(f"PolicyNet: arch must be 'transformer' or 'mlp', got '{spec.arch}'")
        self.spec = spec
        d = spec.d_model
        self.names = list(spec.fields)
        unknown = sorted(set(spec.reduce) - set(spec.fields))
        if unknown:
            raise ValueError(f"PolicySpec.reduce names {unknown}, which are not observation fields "
                             f"(fields: {sorted(spec.fields)})")
        self.proj = nn.ModuleDict({k: nn.Linear(spec.input_dim(k), d) for k in spec.fields})
        self.field_emb = nn.Parameter(torch.randn(len(self.names), d) * 0.02)
        for k in spec.reduce:
            n, r = spec.fields[k], spec.input_dim(k)
            self.register_buffer(f"red_mean_{k}", torch.zeros(n))
            self.register_buffer(f"red_proj_{k}", torch.zeros(n, r))
        if spec.reduce:
            self.register_buffer("reducers_fitted", torch.zeros(()))
        if spec.normalize:
            for k in spec.fields:
                self.register_buffer(f"obs_mean_{k}", torch.zeros(spec.input_dim(k)))
                self.register_buffer(f"obs_var_{k}", torch.ones(spec.input_dim(k)))
            self.register_buffer("obs_count", torch.zeros(()))
        self.norm = nn.LayerNorm(d)
        if spec.arch == "transformer":
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            layer = nn.TransformerEncoderLayer(d, spec.n_heads, dim_feedforward=spec.ff_dim, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, spec.n_layers, enable_nested_tensor=False)
        else:
            self.encoder = nn.Sequential(nn.Linear(d * len(self.names), spec.ff_dim), nn.Tanh(),
                                         nn.Linear(spec.ff_dim, d), nn.Tanh())
        self.retrieve_head = nn.Linear(d, 2)
        self.query_head = nn.Linear(d, spec.n_modes) if spec.n_modes > 1 else None
        self.value_head = nn.Linear(d, 1)
        # start near uniform so early exploration is not decided by the init
        for head in (self.retrieve_head, self.query_head):
            if head is not None:
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)

    def group_parameters(self, group: str) -> list[nn.Parameter]:
        """Parameters of one group: ``trunk`` (projections, embeddings, encoder), ``retrieve``, ``query``, ``value``."""
        if group == "retrieve":
            return list(self.retrieve_head.parameters())
        if group == "query":
            return list(self.query_head.parameters()) if self.query_head is not None else []
        if group == "value":
            return list(self.value_head.parameters())
        if group == "trunk":
            heads = {id(p) for g in ("retrieve", "query", "value") for p in self.group_parameters(g)}
            return [p for p in self.parameters() if id(p) not in heads]
        raise ValueError(f"unknown parameter group '{group}' (valid: {', '.join(GROUPS)})")

    def freeze(self, groups: list[str] | tuple[str, ...]) -> None:
        """Stop gradients into the named groups (e.g. ``["trunk", "retrieve"]`` trains only QueryGen)."""
        for g in groups:
            for p in self.group_parameters(g):
                p.requires_grad_(False)

    @property
    def needs_reducer_fit(self) -> bool:
        return bool(self.spec.reduce) and float(self.reducers_fitted) == 0.0

    @torch.no_grad()
    def fit_reducers(self, obs: dict[str, torch.Tensor]) -> None:
        """Fit every ``reduce`` field's PCA (mean + top-k right singular vectors) on a batch of observations.

        Rows whose field is all zeros (masked) are ignored; with fewer than two real rows the projection stays
        zero (the field then contributes nothing) and the fit is retried on the next call."""
        if not self.spec.reduce:
            return
        ok = True
        for k in self.spec.reduce:
            x = torch.nan_to_num(obs[k].reshape(obs[k].shape[0], -1).float())
            x = x[x.abs().sum(1) > 0]
            if x.shape[0] < 2:
                ok = False
                continue
            mean = x.mean(0)
            _, _, vt = torch.linalg.svd(x - mean, full_matrices=False)
            r = self.spec.input_dim(k)
            proj = torch.zeros(x.shape[1], r)
            proj[:, : min(r, vt.shape[0])] = vt[:r].T
            # a deterministic sign per component (SVD's is arbitrary): the largest-magnitude loading is positive
            sign = torch.sign(proj[proj.abs().argmax(0), torch.arange(r)])
            proj = proj * torch.where(sign == 0, torch.ones_like(sign), sign)
            getattr(self, f"red_mean_{k}").copy_(mean)
            getattr(self, f"red_proj_{k}").copy_(proj)
        if ok:
            self.reducers_fitted.fill_(1.0)

    def _reduced(self, obs: dict[str, torch.Tensor], k: str) -> torch.Tensor:
        x = obs[k].reshape(obs[k].shape[0], -1)
        if k in self.spec.reduce:
            x = torch.nan_to_num(x.float())
            real = (x.abs().sum(1, keepdim=True) > 0).float()  # a masked (all-zero) field stays zero
            x = ((x - getattr(self, f"red_mean_{k}")) @ getattr(self, f"red_proj_{k}")) * real
        return squash(x)

    @torch.no_grad()
    def update_normalizer(self, obs: dict[str, torch.Tensor], max_count: float = 1e6) -> None:
        """Merge a batch into the running mean/variance of every field (parallel Welford update).

        The effective count is capped at ``max_count`` so the statistics can follow a drifting
        state distribution (the policy changes what it visits)."""
        if not self.spec.normalize:
            return
        n_old = float(self.obs_count)
        for k in self.names:
            x = self._reduced(obs, k)
            n_new = x.shape[0]
            if n_new == 0:
                return
            mean_b, var_b = x.mean(0), x.var(0, unbiased=False)
            mean, var = getattr(self, f"obs_mean_{k}"), getattr(self, f"obs_var_{k}")
            tot = n_old + n_new
            delta = mean_b - mean
            new_mean = mean + delta * (n_new / tot)
            new_var = (var * n_old + var_b * n_new + delta ** 2 * n_old * n_new / tot) / tot
            mean.copy_(new_mean)
            var.copy_(new_var)
        self.obs_count.fill_(min(n_old + n_new, max_count))

    def _field_input(self, obs: dict[str, torch.Tensor], k: str) -> torch.Tensor:
        x = self._reduced(obs, k)
        if self.spec.normalize and float(self.obs_count) > 0:
            mean, var = getattr(self, f"obs_mean_{k}"), getattr(self, f"obs_var_{k}")
            x = ((x - mean) / torch.sqrt(var.clamp_min(1e-2))).clamp(-10.0, 10.0)
        return x

    def encode(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[B, d_model]`` summary of a batch of Dict observations."""
        toks = [self.proj[k](self._field_input(obs, k)) for k in self.names]
        x = self.norm(torch.stack(toks, dim=1) + self.field_emb)  # [B, F, d]
        if self.spec.arch == "transformer":
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
            return self.encoder(x)[:, 0]
        return self.encoder(x.flatten(1))

    def forward_heads(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``retrieve_logits [B, 2]``, ``mode_logits [B, n_modes]`` (zeros without a query head), ``value [B]``."""
        h = self.encode(obs)
        r = self.retrieve_head(h)
        m = self.query_head(h) if self.query_head is not None else torch.zeros(h.shape[0], 1, device=h.device)
        return {"retrieve_logits": r, "mode_logits": m, "value": self.value_head(h).squeeze(-1)}


def floor_logits(logits: torch.Tensor, floor: float) -> torch.Tensor:
    """Mix a 2-way softmax with uniform so each action keeps probability ≥ ``floor``; returns log-probs.

    ``p' = floor + (1 − 2·floor)·p``. The argmax is unchanged, so greedy decisions are unaffected.
    """
    if floor <= 0:
        return logits
    p = torch.softmax(logits, dim=-1)
    return torch.log(floor + (1.0 - 2.0 * floor) * p)
