"""Trained step-error probes: feature spec, training with early stopping, save / load with metadata checks.

A :class:`Probe` is (feature spec, normalisation stats, torch network, threshold, model id). Its features
are computed by the same functions as the live signals (:func:`agents.signals.pulse_features`, …), so a
probe scores a live :class:`~agents.reasoners.base.Step` exactly as it scored its training steps.

Saved layout (``save(path)``)::

    path/probe.json          format version, kind, model id, feature spec, architecture, threshold,
                             normalisation mean/std, training info and validation metrics
    path/weights.safetensors network weights

``Probe.load(path, expected_model_id=..., expected_spec=...)`` refuses a probe trained for another model
or another feature spec (layer interval, pooling, parts) with an error naming both.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 4)).astype(np.float32); y = (X[:, 0] > 0).astype(int)
    >>> spec = FeatureSpec("pulse", layers=(0, 2))
    >>> probe, hist = fit_probe(spec, X, y, np.arange(140), np.arange(140, 200), model_id="demo",
    ...                         fit=FitConfig(max_epochs=30))
    >>> hist["best_val_auroc"] > 0.9
    True
"""

from __future__ import annotations

import copy
import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.reasoners.base import Step
from agents.signals.hidden import POOLINGS, PULSE_POOLINGS
from envs.core.config import ConfigBase, helpf
from envs.core.io import atomic_open, write_json
from policies.probes.metrics import auroc
from policies.probes.nets import build_net

log = logging.getLogger(__name__)

PROBE_FORMAT_VERSION = 1
KINDS = ("pulse", "reprobe", "rsus_proxy")
#: the poolings each probe kind reads (PUlSE: :data:`agents.signals.hidden.PULSE_POOLINGS`)
POOLINGS_OF = {"pulse": PULSE_POOLINGS, "reprobe": POOLINGS}


class ProbeMismatchError(ValueError):
    """A saved probe was trained for another model or another feature spec than the one loading it."""


@dataclass(frozen=True)
class FeatureSpec:
    """What a probe reads.

    Attributes:
        signal: ``pulse`` | ``reprobe`` | ``rsus_proxy``.
        layers: PUlSE layer interval ``[a, b]`` (``None`` for the others).
        pooling: over the step's tokens: ``mean`` | ``last`` hidden-state pooling (``last`` for ReProbe; PUlSE's
            features then come from the pooled states), or for PUlSE ``max`` | ``token_mean``: each token's PUlSE
            features (its layer transitions, ``Step.token_transitions``) pooled over the step's tokens by their
            maximum or mean (:func:`agents.signals.hidden.pool_token_transitions`). ``none`` for text features.
        parts: PUlSE ``both`` | ``magnitude`` | ``angle``.
        extra: free-form addition (RSUS proxy: ``surface``; ``surface+minilm``: plus the step's all-MiniLM-L6-v2
            sentence embedding, computed from its text — the paper's "SBERT + surface features";
            ``surface+embedding``: plus an embedding handed in, ``step.meta["sentence_embedding"]`` at run time).
    """

    signal: str
    layers: tuple[int, int] | None = None
    pooling: str = "mean"
    parts: str = "both"
    extra: str = ""

    def __post_init__(self):
        if self.signal not in KINDS:
            raise ValueError(f"unknown probe signal '{self.signal}' (valid: {', '.join(KINDS)})")
        valid = POOLINGS_OF.get(self.signal)  # (text features: no pooling)
        if valid is not None and self.pooling not in valid:
            raise ValueError(f"unknown pooling '{self.pooling}' for a {self.signal} probe (valid: {', '.join(valid)})")
        if self.layers is not None:
            object.__setattr__(self, "layers", (int(self.layers[0]), int(self.layers[1])))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layers"] = list(self.layers) if self.layers is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FeatureSpec:
        return cls(**{**d, "layers": tuple(d["layers"]) if d.get("layers") is not None else None})

    @property
    def signal_needs_states(self) -> bool:
        """Whether the features come from the reasoner's pooled hidden states (PUlSE, ReProbe)."""
        return self.signal in ("pulse", "reprobe")

    def describe(self) -> str:
        iv = f"layer interval {list(self.layers)}, " if self.layers is not None else ""
        return f"{self.signal} ({iv}pooling {self.pooling}, parts {self.parts}{', ' + self.extra if self.extra else ''})"

    # ------------------------------------------------------------------ features
    @property
    def per_token(self) -> bool:
        """Whether the features pool each token's PUlSE features (``max`` | ``token_mean``), not pooled states."""
        return self.signal == "pulse" and self.pooling in ("max", "token_mean")

    def compute(self, *, hidden_mean: np.ndarray | None = None, hidden_last: np.ndarray | None = None,
                texts: list[str] | None = None, embeddings: np.ndarray | None = None,
                token_pooled: np.ndarray | None = None) -> np.ndarray:
        """``[N, F]`` features of ``N`` steps from their pooled states ``[N, L+1, d]``, their per-token transitions
        pooled as :attr:`pooling` says (``token_pooled``, ``[N, 2, L]``: a step dataset's ``pulse_<pooling>`` column) or
        texts."""
        from agents.signals.hidden import pulse_features, pulse_from_transitions

        if self.per_token:
            if token_pooled is None:
                raise ValueError(f"{self.describe()} needs the steps' per-token transitions pooled by "
                                 f"{self.pooling} (a step dataset built before they were recorded: rebuild it)")
            return pulse_from_transitions(np.asarray(token_pooled), self.layers, self.parts)
        if self.signal_needs_states:
            h = hidden_mean if self.pooling == "mean" else hidden_last
            if h is None:
                raise ValueError(f"{self.describe()} needs {self.pooling}-pooled hidden states")
            h = np.asarray(h)
            if self.signal == "pulse":
                return pulse_features(h, self.layers, self.parts)
            return h.reshape(h.shape[0], -1).astype(np.float32)
        from agents.signals.rsus import proxy_features

        if "minilm" in self.extra:  # the sentence encoder reads the step's text (memoised by text)
            from agents.signals.text import encoder

            embeddings = encoder()(list(texts or []))
        elif "embedding" not in self.extra:
            embeddings = None
        return proxy_features(texts or [], embeddings)

    def step_features(self, step: Step) -> np.ndarray:
        """``[1, F]`` features of one live step. A step with no content tokens has no pooled states (the reasoner
        captures them over the step's content): :class:`~agents.signals.base.SignalUnavailable`, so the env masks
        the probe there as it masks PUlSE itself."""
        from agents.signals.base import SignalUnavailable

        if self.signal == "pulse":  # the live PUlSE signal's own path, for every pooling
            from agents.signals.hidden import step_pulse

            return step_pulse(step, self.layers, self.pooling, self.parts)[None]
        if self.signal_needs_states and (step.hidden_mean if self.pooling == "mean" else step.hidden_last) is None:
            raise SignalUnavailable(f"step {step.index} has no captured hidden states for {self.describe()}")
        emb = step.meta.get("sentence_embedding")
        return self.compute(
            hidden_mean=None if step.hidden_mean is None else np.asarray(step.hidden_mean)[None],
            hidden_last=None if step.hidden_last is None else np.asarray(step.hidden_last)[None],
            texts=[step.content], embeddings=None if emb is None else np.asarray(emb)[None])


@dataclass
class FitConfig(ConfigBase):
    """Probe optimisation (BCE with a positive-class weight, early stopping on validation AUROC)."""

    lr: float = helpf(1e-3, "AdamW learning rate", gt=0)
    weight_decay: float = helpf(1e-4, "AdamW weight decay", ge=0)
    batch_size: int = helpf(256, "minibatch size", ge=1)
    max_epochs: int = helpf(200, "maximum epochs", ge=1)
    patience: int = helpf(20, "stop after this many epochs without a better validation AUROC", ge=1)
    pos_weight: float = helpf(3.0, "BCE weight of the positive (error) class", gt=0)
    seed: int = helpf(0, "initialisation and shuffling seed")


@dataclass
class Probe:
    """A trained detector: ``predict_proba`` gives p(step is an error)."""

    spec: FeatureSpec
    net: torch.nn.Module
    arch: dict[str, Any]
    model_id: str
    mean: np.ndarray
    std: np.ndarray
    threshold: float = 0.5
    info: dict[str, Any] = field(default_factory=dict)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """p(error) of feature rows ``X`` (``[N, F]``)."""
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.mean.size:
            raise ValueError(f"probe expects [N, {self.mean.size}] features ({self.spec.describe()}), "
                             f"got {list(X.shape)}")
        self.net.eval()
        with torch.no_grad():
            z = torch.from_numpy((X - self.mean) / self.std)
            return torch.sigmoid(self.net(z)).numpy().astype(np.float64)

    def score_step(self, step: Step) -> float:
        """p(error) of one live step."""
        return float(self.predict_proba(self.spec.step_features(step))[0])

    def __call__(self, step: Step, state: Any = None) -> float:
        """Same as :meth:`score_step` (so a probe plugs in as RSUS's ``u_verb`` or a detector)."""
        return self.score_step(step)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Hard decisions at :attr:`threshold`."""
        return (self.predict_proba(X) >= self.threshold).astype(np.int8)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write ``probe.json`` and ``weights.safetensors`` under the directory ``path`` (atomically)."""
        from safetensors.torch import save

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.net.state_dict().items()}
        with atomic_open(out / "weights.safetensors", "wb") as f:
            f.write(save(state, metadata={"format": "pt"}))
        write_json(out / "probe.json", {
            "format_version": PROBE_FORMAT_VERSION, "kairos_version": _package_version(),
            "kind": self.spec.signal, "model_id": self.model_id,
            "spec": self.spec.to_dict(), "arch": self.arch, "threshold": self.threshold,
            "n_features": int(self.mean.size),
            "normalization": {"mean": self.mean.tolist(), "std": self.std.tolist()}, "info": self.info,
        })
        return out

    @classmethod
    def load(cls, path: str | Path, expected_model_id: str | None = None,
             expected_spec: FeatureSpec | dict[str, Any] | None = None, model_layers: int | None = None) -> Probe:
        """Load a saved probe, checking it was trained for ``expected_model_id`` and ``expected_spec``.

        Args:
            path: the probe directory.
            expected_model_id: the model (artifact fingerprint) it will run on; ``None`` skips the check.
            expected_spec: a :class:`FeatureSpec` (every field checked) or a dict of the fields to check.
            model_layers: the transformer layers of the model it will run on (its layer interval must lie within).

        ``probe.json``'s declared sizes (``n_features``, the normalisation, the architecture's input) are checked
        against each other and against ``weights.safetensors`` before the weights load.

        Raises:
            ProbeMismatchError: naming the saved and the expected value.
            FileNotFoundError / ValueError: missing or corrupt files.
        """
        from safetensors.torch import load_file

        path = Path(path)
        meta_path = path / "probe.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"no probe at {path} (missing probe.json); train one with `kairos probe train`")
        try:
            meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{meta_path}: corrupt probe metadata ({e})") from e
        if meta.get("format_version") != PROBE_FORMAT_VERSION:
            raise ValueError(f"{meta_path}: probe format version {meta.get('format_version')} "
                             f"(this Kairos reads {PROBE_FORMAT_VERSION}); retrain it")
        spec = FeatureSpec.from_dict(meta["spec"])
        if expected_model_id is not None and meta["model_id"] != expected_model_id:
            raise ProbeMismatchError(f"probe {path} was trained for model '{meta['model_id']}', "
                                     f"but is being loaded for model '{expected_model_id}'")
        if expected_spec is not None:
            want = expected_spec.to_dict() if isinstance(expected_spec, FeatureSpec) else dict(expected_spec)
            have = spec.to_dict()
            for key, value in want.items():
                if key not in have:
                    raise ValueError(f"unknown feature-spec field '{key}' (valid: {', '.join(have)})")
                v = list(value) if isinstance(value, tuple) else value
                if have[key] != v:
                    name = "layer interval" if key == "layers" else key
                    raise ProbeMismatchError(f"probe {path} was trained with {name} {have[key]}, "
                                             f"but {name} {v} is expected ({spec.describe()})")
        net = _load_net(path, meta, load_file)
        if model_layers:  # (0: the model's layers are unknown)
            _check_layers(path, spec, meta, int(model_layers))
        norm = meta["normalization"]
        return cls(spec=spec, net=net, arch=meta["arch"], model_id=meta["model_id"],
                   mean=np.asarray(norm["mean"], dtype=np.float32), std=np.asarray(norm["std"], dtype=np.float32),
                   threshold=float(meta["threshold"]), info=meta.get("info", {}))


def _load_net(path: Path, meta: dict[str, Any], load_file) -> torch.nn.Module:
    """The probe's network with its weights, after checking ``probe.json``'s declared sizes against each other and
    against ``weights.safetensors`` (a :class:`ProbeMismatchError` naming both files and the sizes)."""
    meta_path, weights = path / "probe.json", path / "weights.safetensors"
    fix = ("the two files come from different trainings: retrain the probe (`kairos probe train …`) or restore the "
           "probe.json written with these weights")
    arch, norm = meta.get("arch") or {}, meta.get("normalization") or {}
    n_mean, n_std = len(norm.get("mean") or []), len(norm.get("std") or [])
    declared = {"n_features": meta.get("n_features"), "normalization.mean": n_mean, "normalization.std": n_std}
    if arch.get("type") == "mlp":
        declared["arch.in_dim"] = arch.get("in_dim")
    elif arch.get("type") == "reprobe":
        declared["arch.n_tokens x arch.d_in"] = int(arch.get("n_tokens", 0)) * int(arch.get("d_in", 0))
    sizes = {k: v for k, v in declared.items() if v is not None}
    if len(set(sizes.values())) > 1:
        raise ProbeMismatchError(f"{meta_path}: declares inconsistent input sizes "
                                 f"({', '.join(f'{k} {v}' for k, v in sizes.items())}); the file was edited or is "
                                 "damaged: retrain the probe (`kairos probe train …`)")
    try:
        net = build_net(arch)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{meta_path}: bad architecture {arch!r} ({e}); retrain the probe") from None
    if not weights.is_file():
        raise FileNotFoundError(f"{path}: weights.safetensors is missing beside probe.json; retrain the probe")
    try:
        state = load_file(str(weights))
    except Exception as e:  # noqa: BLE001 — safetensors' errors vary (truncated header, bad json)
        raise ValueError(f"{weights}: unreadable probe weights ({type(e).__name__}: {e}); retrain the probe") from None
    own = net.state_dict()
    bad = [f"{k} (probe.json: {list(own[k].shape)}; weights: {list(v.shape)})" for k, v in state.items()
           if k in own and tuple(own[k].shape) != tuple(v.shape)]
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if bad or missing or unexpected:
        what = bad[:3] + [f"missing {m}" for m in missing[:2]] + [f"unexpected {u}" for u in unexpected[:2]]
        raise ProbeMismatchError(f"probe {path}: weights.safetensors does not match the network probe.json declares "
                                 f"(input size {sizes.get('n_features', '?')}): {'; '.join(what)} — {fix}")
    net.load_state_dict(state)
    return net.eval()


def _check_layers(path: Path, spec: FeatureSpec, meta: dict[str, Any], n_layers: int) -> None:
    """The probe's layer interval (PUlSE) or layer count (ReProbe: ``L+1`` tokens) against the model's layers."""
    if spec.layers is not None and not 0 <= spec.layers[0] < spec.layers[1] <= n_layers:
        raise ProbeMismatchError(f"probe {path} reads layer interval {list(spec.layers)}, but the model has "
                                 f"{n_layers} layers (valid: 0 <= a < b <= {n_layers}); retrain it for this model")
    arch = meta.get("arch") or {}
    if arch.get("type") == "reprobe" and int(arch.get("n_tokens", 0)) != n_layers + 1:
        raise ProbeMismatchError(f"probe {path} reads {arch.get('n_tokens')} layer states, but the model has "
                                 f"{n_layers + 1} (layers + embeddings); retrain it for this model")


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kairos-rl")
    except PackageNotFoundError:
        return "unknown"


def default_arch(spec: FeatureSpec, n_features: int, hidden_shape: tuple[int, int] | None = None) -> dict[str, Any]:
    """The design's network for a feature spec (PUlSE / RSUS proxy: MLP 128 → 64 → 1; ReProbe: encoder)."""
    if spec.signal == "reprobe":
        if hidden_shape is None:
            raise ValueError("ReProbe needs the [L+1, d] shape of its input")
        return {"type": "reprobe", "n_tokens": int(hidden_shape[0]), "d_in": int(hidden_shape[1]), "d_model": 64,
                "n_heads": 4, "n_layers": 2, "d_ff": 128, "dropout": 0.0, "layer_embedding": False}
    return {"type": "mlp", "in_dim": int(n_features), "hidden": [128, 64], "dropout": 0.0}


def fit_probe(spec: FeatureSpec, X: np.ndarray, y: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray, *,
              model_id: str, arch: dict[str, Any] | None = None, fit: FitConfig | None = None,
              threshold: float = 0.5, info: dict[str, Any] | None = None) -> tuple[Probe, dict[str, Any]]:
    """Standardise (train statistics), train with BCE (positive-class weight), early-stop on val AUROC.

    With a single class in validation (AUROC undefined) the validation loss decides instead.

    Returns:
        the probe (best validation epoch restored) and a history dict.
    """
    fit = fit or FitConfig()
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32).reshape(-1)
    arch = arch or default_arch(spec, X.shape[1])
    Xtr, ytr, Xva, yva = X[train_idx], y[train_idx], X[val_idx], y[val_idx]
    if len(Xtr) == 0 or len(Xva) == 0:
        raise ValueError(f"empty split (train {len(Xtr)}, val {len(Xva)} steps)")
    mean = Xtr.mean(0)
    std = Xtr.std(0)
    std = np.where(std > 1e-6, std, 1.0).astype(np.float32)  # a constant feature is only centred
    torch.manual_seed(fit.seed)
    net = build_net(arch)
    opt = torch.optim.AdamW(net.parameters(), lr=fit.lr, weight_decay=fit.weight_decay)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(fit.pos_weight))
    xt, yt = torch.from_numpy((Xtr - mean) / std), torch.from_numpy(ytr)
    xv, yv = torch.from_numpy((Xva - mean) / std), torch.from_numpy(yva)
    gen = torch.Generator().manual_seed(fit.seed)
    best, best_epoch, best_state, bad = -math.inf, -1, copy.deepcopy(net.state_dict()), 0
    hist: dict[str, Any] = {"val_auroc": [], "val_loss": []}
    for epoch in range(fit.max_epochs):
        net.train()
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), fit.batch_size):
            idx = perm[i: i + fit.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            logits = net(xv)
            vloss = float(loss_fn(logits, yv))
        vauc = auroc(yva, logits.numpy())
        hist["val_auroc"].append(vauc)
        hist["val_loss"].append(vloss)
        score = vauc if not math.isnan(vauc) else -vloss
        if score > best + 1e-6:
            best, best_epoch, best_state, bad = score, epoch, copy.deepcopy(net.state_dict()), 0
        else:
            bad += 1
            if bad >= fit.patience:
                break
    net.load_state_dict(best_state)
    net.eval()
    hist.update(best_epoch=best_epoch, epochs=len(hist["val_auroc"]),
                best_val_auroc=hist["val_auroc"][best_epoch] if best_epoch >= 0 else math.nan)
    log.info("probe %s: best val AUROC %.4f at epoch %d of %d", spec.describe(), hist["best_val_auroc"],
             best_epoch + 1, hist["epochs"])
    probe = Probe(spec=spec, net=net, arch=arch, model_id=model_id, mean=mean.astype(np.float32), std=std,
                  threshold=threshold, info={**(info or {}), "fit": fit.to_dict(), "best_epoch": best_epoch,
                                             "n_train": int(len(Xtr)), "n_val": int(len(Xva))})
    return probe, hist
