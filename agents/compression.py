"""Implicit evidence compression: keep the evidence sentences the flagged step attends to (optional).

Before a flagged step is regenerated with retrieved passages, one forward pass runs over

    context before the step  +  the evidence lines (as the reasoner would inject them)  +  the flagged step

with eager attention. The importance of evidence sentence ``s`` to the step is the attention mass the step's
tokens put on it, averaged over layers ``ℓ`` and heads ``h``::

    I_s = mean_{ℓ,h}  mean_{t ∈ step}  Σ_{j ∈ s}  A^{ℓ,h}[t, j]

and its relative importance ``I_s / max_s' I_s'``. Sentences with relative importance ≥ ``tau_rel``
(default 0.45) are kept (so the most attended one always is), in their original order; a passage left with
no sentence is dropped. The step is then regenerated with the kept text only. The pass costs one forward
over the context (no generation) and needs a transformers model; the model's attention implementation is
switched to eager for that pass and restored. The importance pass always places the evidence where ``step`` injection puts it
(right before the step); with ``front`` injection the kept sentences are then injected at the front.

Example::

    kept, info = compress_evidence(reasoner, state, ["Paris is in France. It has 2M people."],
                                   "Step 1: Paris is the capital of France.", tau_rel=0.45)
    info["tokens_before"], info["tokens_after"], info["kept"]
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

_SENT = re.compile(r"(?<=[.!?])\s+(?=\S)")


def split_sentences(passage: str) -> list[str]:
    """Sentences of a passage (split after ``.``, ``!`` or ``?`` followed by space).

    Example:
        >>> split_sentences("A is B. C is D . E?")
        ['A is B.', 'C is D .', 'E?']
    """
    return [s for s in _SENT.split(passage.strip()) if s]


def sentence_importance(model, prefix_ids: list[int], sentence_ids: list[list[int]], step_ids: list[int],
                        between_ids: list[int] | None = None) -> np.ndarray:
    """``I_s`` of each sentence (see the module docstring) from one eager forward pass.

    Args:
        model: a transformers causal LM.
        prefix_ids: the context before the evidence (including any evidence framing such as ``Evidence:``
            at the start of the first line).
        sentence_ids: token ids of each evidence sentence, in order (framing between passages included in
            the sentence that follows it).
        step_ids: token ids of the flagged step (the queries).
        between_ids: tokens between the last sentence and the step (e.g. a newline), not scored.
    """
    import torch

    if not sentence_ids:
        return np.zeros(0)
    if not step_ids:
        raise ValueError("sentence_importance: the step has no tokens")
    ids, spans = list(prefix_ids), []
    for s in sentence_ids:
        spans.append((len(ids), len(ids) + len(s)))
        ids += list(s)
    ids += list(between_ids or [])
    q0 = len(ids)
    ids += list(step_ids)
    device = next(model.parameters()).device
    prev = getattr(model.config, "_attn_implementation", None)
    switched = prev != "eager"
    if switched:
        model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids], device=device), output_attentions=True, use_cache=False)
    finally:
        if switched:
            model.set_attn_implementation(prev)
    att = torch.stack([a[0] for a in out.attentions]).float()  # [L, H, T, T]
    q = att[:, :, q0:, :]                                      # the step's tokens as queries
    mass = torch.stack([q[..., a:b].sum(-1) for a, b in spans], dim=-1)  # [L, H, n_step, n_sent]
    return mass.mean(dim=(0, 1, 2)).cpu().numpy().astype(np.float64)


def compress_evidence(reasoner, state, evidence: list[str], step_text: str, tau_rel: float = 0.45
                      ) -> tuple[list[str], dict[str, Any]]:
    """The evidence passages reduced to the sentences the step attends to (see the module docstring).

    Args:
        reasoner: a reasoner with ``model`` and ``evidence_framing()`` (micro-world, transformers).
        state: the reasoner state the step was generated from (before the step).
        evidence: passages about to be injected.
        step_text: the flagged step's line.
        tau_rel: keep sentences whose importance is at least this share of the most important one.

    Returns:
        ``(kept passages, info)`` with ``info`` = sentences and whitespace tokens before / after, and the
        relative importance of every sentence.
    """
    if not 0.0 <= tau_rel <= 1.0:
        raise ValueError(f"tau_rel must be in [0, 1], got {tau_rel}")
    if not hasattr(reasoner, "evidence_framing") or getattr(reasoner, "model", None) is None:
        raise ValueError(f"{type(reasoner).__name__} cannot compress evidence: it needs a local transformers "
                         "model (attention weights) and evidence_framing()")
    sents = [split_sentences(p) or [p] for p in evidence]
    flat = [(i, s) for i, ss in enumerate(sents) for s in ss]
    if len(flat) <= 1:
        n = sum(len(p.split()) for p in evidence)
        return list(evidence), {"sentences_before": len(flat), "sentences_after": len(flat), "tokens_before": n,
                                "tokens_after": n, "relative_importance": [1.0] * len(flat)}
    encode, line_start, line_sep, line_end, step_end = reasoner.evidence_framing()
    sentence_ids = []
    for k, (i, s) in enumerate(flat):
        new_line = k == 0 or flat[k - 1][0] != i
        lead = ("" if k == 0 else (line_end + line_start if new_line else line_sep))
        sentence_ids.append(encode(lead + s))
    prefix = list(state.gen.ids) + encode(line_start)
    imp = sentence_importance(reasoner.model, prefix, sentence_ids, encode(step_text + step_end),
                              between_ids=encode(line_end))
    rel = imp / imp.max() if imp.max() > 0 else np.ones_like(imp)
    keep = rel >= tau_rel
    kept: list[str] = []
    for i in range(len(evidence)):
        ss = [s for (j, s), k in zip(flat, keep) if j == i and k]
        if ss:
            kept.append(" ".join(ss))
    info = {"sentences_before": len(flat), "sentences_after": int(keep.sum()),
            "tokens_before": sum(len(p.split()) for p in evidence), "tokens_after": sum(len(p.split()) for p in kept),
            "relative_importance": [round(float(x), 4) for x in rel]}
    return kept, info
