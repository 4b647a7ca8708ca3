"""A learned step-boundary segmenter for free-form reasoning chains (docs/design.md §4).

Rule-based segmentation (:mod:`agents.segmentation`) needs ``Step N:`` markers. When a model writes free
text, this segmenter predicts where a new step starts: a small transformer encoder reads 128-token windows
(stride 64) and gives each token the probability that a step begins at it; overlapping windows are averaged.

Tokens are words and punctuation marks (whitespace, newlines and step markers are removed from the input,
so the model must find boundaries from the text alone). A token is embedded as a hashed lower-cased form
(``n_buckets`` buckets, so any vocabulary works: micro-world names, English, medical terms) plus its shape
(lower, Capitalised, UPPER, digit, punctuation). Training data are chains whose boundaries we know — the
micro-world LM's and SmolLM2's ``Step`` lines with their markers stripped (:func:`chain_example`).

Example:
    >>> toks, labels = chain_example(["Step 1 : Mira 's mother is Tovan .", "Answer : Tovan"])
    >>> toks, labels
    (['Mira', "'", 's', 'mother', 'is', 'Tovan', '.', 'Tovan'], [1, 0, 0, 0, 0, 0, 0, 1])
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.core.io import write_json

log = logging.getLogger(__name__)

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
SHAPES = ("lower", "capital", "upper", "digit", "punct", "other")
FORMAT = "kairos-boundary-segmenter"


def tokenize(text: str) -> list[str]:
    """Words and single punctuation marks."""
    return TOKEN_RE.findall(text)


def chain_example(lines: Sequence[str]) -> tuple[list[str], list[int]]:
    """Tokens of a chain with its step markers removed, and 1 at the first token of every step/answer."""
    from agents.segmentation import parse_header

    toks: list[str] = []
    labels: list[int] = []
    for line in lines:
        h = parse_header(line)
        body = line[h.end:] if h is not None else line
        t = tokenize(body)
        if not t:
            continue
        toks += t
        labels += [1] + [0] * (len(t) - 1)
    return toks, labels


def _shape(tok: str) -> int:
    if tok.isdigit():
        return 3
    if not re.match(r"\w", tok):
        return 4
    if tok.isupper() and len(tok) > 1:
        return 2
    if tok[:1].isupper():
        return 1
    if tok.islower():
        return 0
    return 5


def _bucket(tok: str, n: int) -> int:
    return int.from_bytes(hashlib.blake2b(tok.lower().encode(), digest_size=4).digest(), "little") % (n - 1) + 1


def encode_tokens(toks: Sequence[str], n_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bucket ids, shape ids)`` of tokens (bucket 0 is padding)."""
    return (np.array([_bucket(t, n_buckets) for t in toks], dtype=np.int64),
            np.array([_shape(t) for t in toks], dtype=np.int64))


def windows(n: int, size: int, stride: int) -> list[tuple[int, int]]:
    """``(start, end)`` of the windows of ``size`` tokens every ``stride`` covering ``n`` tokens (the last
    one ends at ``n``)."""
    starts = list(range(0, max(n - size, 0) + 1, stride))
    if starts[-1] + size < n:
        starts.append(n - size)
    return [(a, min(a + size, n)) for a in starts]


@dataclass
class SegmenterConfig:
    """Size of the segmenter (saved with it).

    The default (2 layers × 64) is smaller than docs/design.md §4's 3 × 256 × 4 heads, on measurement: on the same chains and
    8 epochs the larger one scored boundary F1 0.414 on SmolLM2's chains vs 0.703, and trained 10× slower
    (``kairos bench segmenter --paper-size``; docs/results.md)."""

    n_buckets: int = 8192
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ff_dim: int = 128
    window: int = 128
    stride: int = 64


def build_net(cfg: SegmenterConfig):
    import torch
    from torch import nn

    class BoundaryNet(nn.Module):
        """Token buckets + shapes + positions → transformer encoder → one boundary logit per token."""

        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.n_buckets, cfg.d_model, padding_idx=0)
            self.shape = nn.Embedding(len(SHAPES) + 1, cfg.d_model, padding_idx=len(SHAPES))
            self.pos = nn.Embedding(cfg.window, cfg.d_model)
            layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.ff_dim, dropout=0.1, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
            self.out = nn.Linear(cfg.d_model, 1)

        def forward(self, ids, shapes, mask):  # mask: True = padding
            pos = torch.arange(ids.shape[1], device=ids.device)
            h = self.tok(ids) + self.shape(shapes) + self.pos(pos)[None]
            return self.out(self.enc(h, src_key_padding_mask=mask)).squeeze(-1)

    return BoundaryNet()


class BoundarySegmenter:
    """Predict step boundaries in text; train with :func:`train_segmenter`.

    Args:
        net: The :func:`build_net` module.
        cfg: Its size.
        threshold: Probability above which a token starts a step.
    """

    def __init__(self, net, cfg: SegmenterConfig, threshold: float = 0.5) -> None:
        self.net, self.cfg, self.threshold = net, cfg, threshold

    def windows(self, n: int) -> list[tuple[int, int]]:
        """``(start, end)`` of this segmenter's windows (128 tokens, stride 64 by default) covering ``n`` tokens."""
        return windows(n, self.cfg.window, self.cfg.stride)

    def token_probs(self, toks: Sequence[str]) -> np.ndarray:
        """Boundary probability of every token (overlapping windows averaged)."""
        import torch

        if not toks:
            return np.zeros(0, dtype=np.float32)
        ids, shapes = encode_tokens(toks, self.cfg.n_buckets)
        acc = np.zeros(len(toks))
        cnt = np.zeros(len(toks))
        self.net.eval()
        with torch.no_grad():
            for a, b in self.windows(len(toks)):
                logits = self.net(torch.from_numpy(ids[a:b])[None], torch.from_numpy(shapes[a:b])[None],
                                  torch.zeros(1, b - a, dtype=torch.bool))[0]
                acc[a:b] += torch.sigmoid(logits).numpy()
                cnt[a:b] += 1
        return (acc / cnt).astype(np.float32)

    def segment(self, text: str) -> list[str]:
        """Split free text into steps at the predicted boundaries (the first token always starts one)."""
        spans = [(m.start(), m.group()) for m in TOKEN_RE.finditer(text)]
        if not spans:
            return []
        probs = self.token_probs([t for _, t in spans])
        cuts = [0] + [spans[i][0] for i in range(1, len(spans)) if probs[i] >= self.threshold] + [len(text)]
        return [text[a:b].strip() for a, b in zip(cuts, cuts[1:]) if text[a:b].strip()]

    # ---------------------------------------------------------------- io
    def save(self, folder: str | Path, **meta: Any) -> Path:
        import torch

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "model.pt.tmp"
        torch.save(self.net.state_dict(), tmp)
        tmp.replace(folder / "model.pt")
        write_json(folder / "segmenter.json", {"format": FORMAT, "config": asdict(self.cfg),
                                               "threshold": self.threshold, **meta})
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> BoundarySegmenter:
        import torch

        folder = Path(folder)
        meta_path = folder / "segmenter.json"
        if not meta_path.is_file() or not (folder / "model.pt").is_file():
            raise FileNotFoundError(f"{folder}: not a boundary segmenter (needs segmenter.json and model.pt)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"{meta_path}: format {meta.get('format')!r}, expected {FORMAT!r}")
        cfg = SegmenterConfig(**meta["config"])
        net = build_net(cfg)
        net.load_state_dict(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
        return cls(net, cfg, meta.get("threshold", 0.5))


def _batches(examples, cfg: SegmenterConfig, batch_size: int, rng: np.random.Generator):
    """Random windows of the training chains (each chain cut into 128-token windows, stride 64)."""
    items = []
    for toks, labels in examples:
        ids, shapes = encode_tokens(toks, cfg.n_buckets)
        y = np.array(labels, dtype=np.float32)
        for a, b in windows(len(toks), cfg.window, cfg.stride):
            items.append((ids[a:b], shapes[a:b], y[a:b], a == 0))
    order = rng.permutation(len(items))
    for lo in range(0, len(order), batch_size):
        chunk = [items[i] for i in order[lo: lo + batch_size]]
        w = max(len(c[0]) for c in chunk)
        ids = np.zeros((len(chunk), w), dtype=np.int64)
        shapes = np.full((len(chunk), w), len(SHAPES), dtype=np.int64)
        y = np.zeros((len(chunk), w), dtype=np.float32)
        valid = np.zeros((len(chunk), w), dtype=bool)
        for j, (a, s, t, first) in enumerate(chunk):
            ids[j, : len(a)], shapes[j, : len(a)], y[j, : len(a)] = a, s, t
            valid[j, : len(a)] = True
            if first:
                valid[j, 0] = False  # the chain's first token is a boundary by definition: not learned
        yield ids, shapes, y, valid


def train_segmenter(train: Sequence[tuple[list[str], list[int]]], cfg: SegmenterConfig | None = None,
                    epochs: int = 8, lr: float = 2e-3, batch_size: int = 32, pos_weight: float = 3.0,
                    seed: int = 0) -> BoundarySegmenter:
    """Fit the segmenter on ``(tokens, labels)`` chains with weighted BCE (boundaries are rare)."""
    import torch

    if not train:
        raise ValueError("train_segmenter: no training chains")
    cfg = cfg or SegmenterConfig()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = build_net(cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    lossf = torch.nn.BCEWithLogitsLoss(reduction="none", pos_weight=torch.tensor(pos_weight))
    for ep in range(epochs):
        net.train()
        tot, n = 0.0, 0
        for ids, shapes, y, valid in _batches(train, cfg, batch_size, rng):
            ids_t, valid_t = torch.from_numpy(ids), torch.from_numpy(valid)
            pad = ids_t == 0
            logits = net(ids_t, torch.from_numpy(shapes), pad)
            loss = (lossf(logits, torch.from_numpy(y)) * valid_t).sum() / valid_t.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            tot += float(loss.detach()) * len(ids)
            n += len(ids)
        log.info("segmenter epoch %d: loss %.4f", ep + 1, tot / max(n, 1))
    return BoundarySegmenter(net, cfg)


def boundary_scores(pred: Sequence[int], gold: Sequence[int]) -> dict[str, float]:
    """Precision / recall / F1 of predicted boundary positions (exact token match; the first token of a
    chain is excluded — it is a boundary by definition)."""
    p = np.asarray(pred[1:], dtype=bool)
    g = np.asarray(gold[1:], dtype=bool)
    tp = float((p & g).sum())
    prec = tp / p.sum() if p.sum() else 0.0
    rec = tp / g.sum() if g.sum() else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"tp": tp, "pred": float(p.sum()), "gold": float(g.sum()), "precision": prec, "recall": rec, "f1": f1}


def sentence_start_baseline(toks: Sequence[str]) -> list[int]:
    """Reference rule: a step starts after every sentence-final mark (``.``, ``?``, ``!``)."""
    return [1] + [int(toks[i - 1] in (".", "?", "!")) for i in range(1, len(toks))]
