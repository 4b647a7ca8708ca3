"""DRAGIN's RIND (docs/design.md §4): token importance × uncertainty × step length; needs attentions.

The query: DRAGIN's QFS is the query mode ``qfs`` (:func:`qfs_terms`; micro-world reasoner); a row that
queries with another mode is named ``DRAGIN[no QFS]``. The trigger is per step (the env's unit of decision): a step
whose highest RIND exceeds θ is regenerated whole with the evidence, where DRAGIN truncates its output at the trigger
token and regenerates from there — hence the benchmark row ``DRAGIN[step-level]``.

For content token ``i`` of a step with ``n`` content tokens:

* ``a_i`` — the last-layer attention the token *receives*: for the sequence position ``p_i`` holding the
  token as input, ``max_{q > p_i} mean_heads A[q, p_i]`` (rows = queries, columns = keys; DRAGIN's order: the
  mean over heads first, then the max over later queries); a token with no later query receives 0. The
  generation pass computes the same quantity over the queries it feeds (:mod:`agents.reasoners.stepgen`:
  the step's later tokens, not its end token) — one definition, tested equal. A backend stores these raw values in ``step.meta["attn_received"]`` (length
  ``n``), e.g. computed with :func:`attention_received` from an eager-attention forward pass.
* ``ā_i = a_i / Σ_j a_j`` (normalised in the step; uniform ``1/n`` if every ``a_i`` is 0);
* ``H_i`` — entropy of the predictive distribution that generated the token (``step.entropies[i]``);
* ``s_i = ā_i · H_i · n``; the signal is ``max_i s_i`` over the step's **content words** (DRAGIN fires when it
  exceeds θ). As in DRAGIN, only tokens of nouns, proper nouns, adjectives, verbs and numbers are scored (Penn tags
  NN*, JJ*, VB*, CD from the offline tagger of :mod:`agents.query`; auxiliaries such as "is" do not count; without
  a tagger, every word outside the function-word list); a word's sub-word tokens share its tag. The backend gives
  the tokens' text in ``step.meta["token_texts"]`` (a token beginning with whitespace starts a word); without it
  every token is scored. A step with no content word scores 0.

Example:
    >>> import numpy as np
    >>> A = np.array([[1., 0, 0], [.6, .4, 0], [.2, .5, .3]])   # one head, 3 positions
    >>> attention_received(A, [0, 1]).tolist()                  # max over later queries
    [0.6, 0.5]
    >>> rind_scores(np.array([0.6, 0.5]), np.array([1.0, 2.0])).round(4).tolist()
    [1.0909, 1.8182]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.reasoners.base import Step
from agents.signals.base import SignalBase, SignalUnavailable, register_signal


def attention_received(attn: np.ndarray, positions: list[int] | np.ndarray) -> np.ndarray:
    """Per-token attention received: max over later query positions, mean over heads.

    Args:
        attn: ``[heads, T, T]`` or ``[T, T]`` last-layer attention weights (query, key).
        positions: sequence positions of the step's content tokens.
    """
    A = np.asarray(attn, dtype=np.float64)
    if A.ndim == 3:
        A = A.mean(0)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"attention must be [heads, T, T] or [T, T], got {np.shape(attn)}")
    out = np.zeros(len(positions))
    for i, p in enumerate(positions):
        later = A[p + 1:, p]
        out[i] = later.max() if later.size else 0.0
    return out


def rind_scores(attn_received: np.ndarray, entropies: np.ndarray) -> np.ndarray:
    """``s_i = ā_i · H_i · n`` over the ``n`` content tokens (``entropies`` may carry the end token too)."""
    a = np.asarray(attn_received, dtype=np.float64)
    n = a.size
    if n == 0:
        raise SignalUnavailable("RIND needs at least one content token")
    H = np.asarray(entropies, dtype=np.float64)
    if H.size < n:
        raise ValueError(f"RIND: {n} attention values but only {H.size} token entropies")
    total = a.sum()
    a_bar = a / total if total > 0 else np.full(n, 1.0 / n)
    return a_bar * H[:n] * n


@register_signal("rind", group="rind", scalars={"rind": 0})
class RIND(SignalBase):
    """DRAGIN RIND: ``max_i ā_i · H_i · n`` from ``step.meta["attn_received"]`` and ``step.entropies``."""

    label = "DRAGIN"
    requires = ("attentions", "logprobs")
    bounds = (0.0, math.inf)
    error_direction = 1

    def __call__(self, step: Step, state: Any = None) -> np.ndarray:
        a = step.meta.get("attn_received")
        if a is None or step.entropies is None:
            raise SignalUnavailable(f"step {step.index} has no attn_received / entropies for RIND")
        s = rind_scores(a, step.entropies)
        texts = step.meta.get("token_texts")
        if texts is not None:
            keep = content_token_mask(texts)
            return np.array([s[keep].max() if keep.any() else 0.0], dtype=np.float32)
        return np.array([s.max()], dtype=np.float32)


#: Penn tags of the words DRAGIN scores (NOUN, PROPN, ADJ, VERB, NUM)
DRAGIN_TAGS = ("NN", "JJ", "VB", "CD")


def token_words(token_texts: list[str]) -> tuple[list[int], list[str]]:
    """``(word_of, words)``: tokens grouped into words — a token that begins with whitespace, or follows one that
    is punctuation, or is punctuation itself, starts a new word (DRAGIN merges sub-word tokens the same way)."""
    import re

    word_of, words_ = [], []
    for t in token_texts:
        starts = not words_ or t[:1].isspace() or not re.search(r"\w", words_[-1][-1:] or " ") \
            or not re.search(r"\w", t[:1] or " ")
        if starts:
            words_.append(t.strip())
        else:
            words_[-1] += t.strip()
        word_of.append(len(words_) - 1)
    return word_of, [w or "_" for w in words_]


def content_word_flags(words_: list[str]) -> list[bool]:
    """Per word: a noun / adjective / verb (not an auxiliary) / number (DRAGIN's real words)."""
    import re

    from agents.query import AUXILIARIES, FUNCTION_WORDS, pos_tag

    tagged = pos_tag(" ".join(words_))
    if tagged is not None and len(tagged) == len(words_):
        return [(t.startswith(DRAGIN_TAGS) and w.lower() not in AUXILIARIES and bool(re.search(r"\w", w)))
                or bool(re.fullmatch(r"\d[\d.,]*", w)) for w, t in tagged]  # numbers: the lexicon misses some
    # no tagger (or it split the words differently): every word outside the function-word list
    return [bool(re.search(r"\w", w)) and w.lower() not in FUNCTION_WORDS for w in words_]


def content_token_mask(token_texts: list[str]) -> np.ndarray:
    """Which tokens belong to a content word (DRAGIN's filter): tokens grouped into words (:func:`token_words`),
    the words tagged, and every token of a noun / adjective / verb (not an auxiliary) / number kept."""
    word_of, words_ = token_words(token_texts)
    keep_word = content_word_flags(words_)
    return np.array([keep_word[i] for i in word_of], dtype=bool)


#: DRAGIN's ``retrieve_keep_top_k`` (its HotpotQA / 2Wiki configs): the query keeps this many words
QFS_TOP_K = 35


def qfs_pass(model, lines: list[tuple[list[int], list[str], list[int], list[str]]]) -> dict[str, Any]:
    """One eager forward pass over text lines, the inputs of :func:`qfs_terms`: each line is ``(header ids, their
    texts, content ids, their texts)`` — headers (``Question:``, ``Step i:``) are not scorable — joined by nothing
    (a line's content carries its newline as a header-like unscorable token if the backend adds one); the last
    line is the current step. Needs a model with eager attention."""
    import torch

    ids: list[int] = []
    texts: list[str] = []
    scorable: list[bool] = []
    for h_ids, h_txt, c_ids, c_txt in lines:
        step_start = len(ids) + len(h_ids)
        ids += list(h_ids) + list(c_ids)
        texts += list(h_txt) + list(c_txt)
        scorable += [False] * len(h_ids) + [t.strip() != "" for t in c_txt]
    if getattr(model.config, "_attn_implementation", None) != "eager":
        raise ValueError("QFS reads attention weights: the model needs eager attention (the env loads it so when "
                         "query_modes has 'qfs')")
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    logp = torch.log_softmax(out.logits[0].float(), -1)
    ent = -(logp.exp() * logp).sum(-1).numpy()  # ent[p]: the distribution that predicts token p + 1
    return {"attn": out.attentions[-1][0].float().mean(0).numpy(), "token_texts": texts,
            "scorable": np.array(scorable, dtype=bool), "step_positions": list(range(step_start, len(ids))),
            "entropies": np.concatenate([[0.0], ent[:-1]])}


def qfs_terms(attn: np.ndarray, token_texts: list[str], scorable: np.ndarray, step_positions: list[int],
              entropies: np.ndarray, keep_top_k: int = QFS_TOP_K) -> list[str]:
    """DRAGIN's query formulation based on self-attention (QFS, its ``real_words`` query).

    One forward pass over the question and the text generated so far, the current step last (no evidence, no
    prompt scaffolding: DRAGIN re-encodes ``question + text``). The step's trigger token is its highest-RIND
    content token (:func:`rind_scores` from the same pass's attention and entropies — a step-level trigger has
    one; DRAGIN takes every token over θ of the flagged sentence). The attention that token's word pays to each
    earlier token (last layer, mean over heads; for each of the word's tokens the row of the query that generated
    it, normalised over the keys before the word, averaged over the word's tokens) is summed per word; the query
    is the ``keep_top_k`` content words of the question and the text with the most attention, in their original
    order, the trigger word excluded.

    Args:
        attn: ``[T, T]`` (or ``[heads, T, T]``) last-layer attention of the pass.
        token_texts: the ``T`` tokens' text (a token beginning with whitespace starts a word).
        scorable: ``[T]`` bool, the tokens that are question or generated text (False: line headers, newlines).
        step_positions: the current step's content token positions.
        entropies: ``[T]`` entropy of the distribution that generated each token (``entropies[p]`` from the
            logits at ``p - 1``).
    """
    A = np.asarray(attn, dtype=np.float64)
    if A.ndim == 3:
        A = A.mean(0)
    T = len(token_texts)
    if A.shape != (T, T) or len(scorable) != T or len(entropies) != T:
        raise ValueError(f"qfs_terms: attention {A.shape}, {T} tokens, {len(scorable)} flags, {len(entropies)} "
                         "entropies must agree")
    word_of, words_ = token_words(token_texts)
    real = content_word_flags(words_)
    pos = list(step_positions)
    if not pos:
        return []
    s = rind_scores(attention_received(A, pos), np.asarray(entropies, dtype=np.float64)[pos])
    keep = np.array([real[word_of[p]] for p in pos], dtype=bool)
    hit = pos[int(np.argmax(np.where(keep, s, -np.inf))) if keep.any() else int(np.argmax(s))]
    w_hit = word_of[hit]
    toks = [p for p in range(T) if word_of[p] == w_hit]
    start = toks[0]
    att = np.zeros(T)
    for p in toks:
        if p == 0 or start == 0:
            continue
        v = A[p - 1, :start]
        att[:start] += v / max(v.sum(), 1e-12)
    att /= len(toks)
    per_word = np.zeros(len(words_))
    np.add.at(per_word, word_of, att)
    cands = sorted({word_of[p] for p in range(T) if scorable[p] and real[word_of[p]] and word_of[p] != w_hit})
    top = sorted(sorted(cands, key=lambda w: -per_word[w])[:keep_top_k])
    return [words_[w] for w in top]
