"""Batched, KV-cached step-by-step generation with signals captured from the SAME forward passes.

This is the engine under the micro-world reasoner and the transformers backend (``hf.py``: any local
causal LM). One call advances a batch of sequences by one *step* (one line): it feeds each
sequence's not-yet-cached tokens (prefill), then decodes greedily (or by sampling) until every row emits
an end-of-step token (newline or end-of-text).

Signals of a step, all from the generation passes (no second pass over the step):

* ``logprobs`` / ``entropies`` / ``maxprobs`` of the step's *content* tokens (everything after the line
  header ``Step k :`` / ``Answer :``) and of its end token;
* ``hidden_mean`` / ``hidden_last``: per-layer hidden states (``n_layers + 1`` rows, row 0 = embeddings)
  at the positions whose next-token prediction produced those tokens — i.e. the inputs ``:`` (the header's
  last token), ``c_1 … c_n`` (the content tokens). ``hidden_last`` is the position of ``c_n``, the state
  that decided the step was complete. ``hidden_first`` is the state at the last *context* token (the input
  that generated the line's first token): the model's summary of the question and every earlier line at the
  moment it starts this one — the content observation's ``context_embedding`` (no extra pass). A separate forward pass over ``context + step`` reproduces them
  exactly at positions ``len(context) + header_len - 1 … len(context) + len(step) - 2`` (tested).
* ``token_transitions``: at each of those positions, PUlSE's per-token layer transitions over the whole stack —
  ``[n, 2, L]``: row 0 the magnitudes ``||h_{l+1} − h_l||``, row 1 the angles ``arccos(cos(h_l, h_{l+1}))``
  (:func:`token_transitions`) — so a probe can pool PUlSE features over the step's tokens (max, mean) instead of
  taking the features of the mean-pooled states; ``[n, 2, L]`` numbers, not the ``[n, L+1, d]`` states.

The line header is found either by a token id (``header_end_id``: content starts after its first
occurrence; the micro-world's word-level ``:``) or by a callable on the generated ids (``header_fn``:
returns the header length in tokens; BPE tokenisers merge ``:`` with neighbours, so real-LM backends find
the header in the decoded text). Signals are recorded for every generated token and sliced to the content
once the step is complete, so the header rule may look at the whole line.

Optional ``attn_received`` (``capture_attentions=True``, eager attention only; DRAGIN's RIND): for content
token ``c_i`` at position ``p_i``,

    a_i = max over q in Q_i of  (mean over heads h of A_h[q, p_i])

— DRAGIN's definition, the same as :func:`agents.signals.attention.attention_received` computes from a full
attention matrix — where ``A_h`` is head ``h`` of the LAST layer's attention (softmax rows, keys = all earlier
positions) and
``Q_i`` are the positions of the step's later generated tokens that are fed in this call — ``c_{i+1} …
c_n``; the end token is fed only by the next call, so it is not in ``Q_i``, and ``a_n = 0`` (empty max).
(A step cut at ``max_new_tokens`` has no end token; its last content token is not fed either, so again
``a_n = 0``.) The rows come from the decode passes (one query row per fed token, only the last layer's
kept); a separate eager forward pass over ``context + step`` reproduces them (tested in
``tests/reasoners/test_stepgen_extras.py``). ``attn_received`` has one value per content token, without
the end token; DRAGIN's normalisation within the step and the product with entropy belong to the signal.

Sequences keep their own KV cache (per layer, unpadded); a batch re-pads them on the left. Regenerating a
step in ``step`` mode appends evidence tokens after the cached prefix, so the prefix's cache is reused.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [heads, T, head_dim]


@dataclass
class GenState:
    """One sequence: its token ids and the KV cache of ``ids[:n_cached]`` (immutable; copy to branch)."""

    ids: list[int]
    cache: KV | None = None
    n_cached: int = 0

    def extend(self, new_ids: list[int]) -> GenState:
        """A new state with ``new_ids`` appended (the cached prefix is shared, not copied)."""
        return GenState(self.ids + list(new_ids), self.cache, self.n_cached)


@dataclass
class StepOutput:
    """A generated step and its signals."""

    ids: list[int]                      # generated token ids incl. the end token
    header_len: int                     # tokens of the line header (``Step k :``), 0 if none
    logprobs: np.ndarray                # [n] log p of each content token and the end token
    entropies: np.ndarray               # [n] entropy (nats) of the predictive distribution there
    maxprobs: np.ndarray                # [n] max softmax probability there
    hidden_mean: np.ndarray | None      # [L+1, d] mean over generating positions
    hidden_last: np.ndarray | None      # [L+1, d] at the last content token
    hidden_first: np.ndarray | None = None  # [L+1, d] at the last context token (generated the first token)
    finished: bool = True               # ended with an end token (not cut by max_new_tokens)
    state: GenState | None = field(default=None, repr=False)  # state after the step (for continuing)
    attn_received: np.ndarray | None = None  # [n_content] last-layer attention received (see module doc)
    token_transitions: np.ndarray | None = None  # [n, 2, L] per-position layer transitions (see module doc)


def token_transitions(h: torch.Tensor) -> np.ndarray:
    """PUlSE's layer transitions at every position of ``h`` (``[T, L+1, d]``): ``[T, 2, L]`` float32, row 0 the
    magnitudes ``||h_{l+1} − h_l||_2``, row 1 the angles ``arccos(clip(cos(h_l, h_{l+1}), −1, 1))`` (computed in
    float64, as :func:`agents.signals.hidden.transitions`, which gives the same numbers from numpy; a zero vector
    has cosine 0 with anything). NaN rows (layers a backend did not capture) give NaN transitions.

    Example:
        >>> h = torch.tensor([[[1., 0.], [0., 1.], [0., 2.]]])      # one position, rows 0..2
        >>> [[round(float(x), 4) for x in row] for row in token_transitions(h)[0]]   # m = [sqrt 2, 1], theta = [pi/2, 0]
        [[1.4142, 1.0], [1.5708, 0.0]]
    """
    h = h.double()
    x, y = h[:, :-1, :], h[:, 1:, :]
    m = (y - x).norm(dim=-1)
    cos = (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1)).clamp_min(1e-12)
    theta = torch.arccos(cos.clamp(-1.0, 1.0))
    return torch.stack([m, theta], dim=1).float().cpu().numpy()


def _pad_left(states: list[GenState], pad_id: int, device: torch.device):
    """Batch the caches (left-padded) and the pending tokens (left-padded)."""
    B = len(states)
    cache_lens = [s.n_cached for s in states]
    pend = [s.ids[s.n_cached:] for s in states]
    if any(len(p) == 0 for p in pend):
        raise ValueError("a state has no pending token to feed; extend it before generating")
    C, P = max(cache_lens), max(len(p) for p in pend)
    input_ids = torch.full((B, P), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((B, C + P), dtype=torch.long, device=device)
    pos = torch.zeros((B, P), dtype=torch.long, device=device)
    for b, (c, p) in enumerate(zip(cache_lens, pend)):
        input_ids[b, P - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[b, C - c: C] = 1
        mask[b, C + P - len(p):] = 1
        pos[b, P - len(p):] = torch.arange(c, c + len(p))
    past = None
    if C > 0:
        ref = next(s.cache for s in states if s.cache is not None)
        n_layers = len(ref)
        H, D = ref[0][0].shape[0], ref[0][0].shape[2]
        layers = []
        for layer in range(n_layers):
            k = torch.zeros((B, H, C, D), dtype=ref[0][0].dtype, device=device)
            v = torch.zeros_like(k)
            for b, s in enumerate(states):
                if s.n_cached:
                    k[b, :, C - s.n_cached:] = s.cache[layer][0]
                    v[b, :, C - s.n_cached:] = s.cache[layer][1]
            layers.append((k, v))
        past = layers
    return input_ids, mask, pos, past


@functools.cache
def _cache_kwarg(model_class: type) -> str:
    """The forward argument that takes the KV cache: ``cache`` (transformers >= 5.20) or ``past_key_values``
    (earlier releases, e.g. the 5.19 that vLLM 0.32 pins)."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@torch.no_grad()
def generate_steps(
    model: torch.nn.Module,
    states: list[GenState],
    *,
    stop_ids: set[int],
    header_end_id: int | None,
    pad_id: int,
    max_new_tokens: int = 24,
    capture_hidden: bool = True,
    sample: bool = False,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    header_fn: Callable[[list[int]], int] | None = None,
    capture_attentions: bool = False,
    no_stop_first: list[bool] | None = None,
    boundary_fn: Callable[[int, list[int]], int | None] | None = None,
) -> list[StepOutput]:
    """Advance every state by one step (one line) in a single batched decode loop.

    Args:
        model: a transformers causal LM (``past_key_values`` + ``output_hidden_states`` support).
        states: sequences to advance; each must have at least one uncached token.
        stop_ids: token ids that end a step (newline, end-of-text).
        header_end_id: token id that ends a line header (``:``); content starts after its first occurrence
            (no occurrence: no content).
        pad_id: padding token id.
        max_new_tokens: cut a step after this many tokens (``finished=False``).
        capture_hidden: pool per-layer hidden states (PUlSE / CoE / probes) during generation.
        sample: sample instead of greedy decoding (for k-sample consistency signals).
        temperature: sampling temperature.
        generator: torch RNG for sampling (seeded by the caller for reproducibility); or one RNG per row, so each
            row's sample is the same in any batch (Gumbel-max sampling).
        header_fn: instead of ``header_end_id``: called with a row's generated ids (end token included),
            returns the header length in tokens (0: no header, everything is content).
        capture_attentions: record ``attn_received`` (needs ``attn_implementation="eager"``).
        no_stop_first: per row, whether its first token may not be a stop token (answer closing: the line has
            to say something); the recorded logprob is still the model's own for the token picked.
        boundary_fn: free-form text (a learned segmenter): called as ``boundary_fn(row, ids)`` with a row's
            generated ids after each token; ``k`` (``1 <= k < len(ids)``) ends the step after its first ``k``
            tokens — the rest is dropped (greedy decoding writes it again as the next step), the KV cache is cut
            to match — and ``None`` goes on.
    """
    from transformers import DynamicCache

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"generate_steps: max_new_tokens must be an integer >= 1 (EnvConfig.max_step_tokens), got "
                         f"{max_new_tokens!r}")
    _check_options(model, header_fn, header_end_id, capture_attentions)
    device = next(model.parameters()).device
    B = len(states)
    input_ids, mask, pos, past = _pad_left(states, pad_id, device)
    base = mask.shape[1]  # key index of the first generated token
    cache = DynamicCache(ddp_cache_data=past) if past is not None else DynamicCache()
    rows = _Rows.of(B)
    hids: list[torch.Tensor] = []  # per decode step [B, L+1, d]: the state that generated token t
    att_max = None  # [B, max_new_tokens]: running max over queries of the head-mean last-layer attention received
    for t in range(max_new_tokens):
        want_att = capture_attentions and t > 0  # prefill rows are the context's, not the step's
        active = None
        if t > 0:  # feed each active row its last token; finished rows get masked padding
            active, input_ids, mask, pos = rows.feed(mask, pos, pad_id, device)
        kw = {"output_attentions": True} if want_att else {}
        kw[_cache_kwarg(type(model))] = cache
        out = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, logits_to_keep=1,
                    use_cache=True, output_hidden_states=capture_hidden, **kw)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        if want_att:
            att_max = _attention_received(att_max, out.attentions[-1], base, t, active, max_new_tokens)
        logits = out.logits[:, -1, :].float()
        logp = torch.log_softmax(logits, dim=-1)
        nxt = _next_tokens(_banned_first(logits, stop_ids, no_stop_first) if t == 0 else logits, sample,
                           temperature, generator)
        if capture_hidden:
            hids.append(torch.stack([h[:, -1, :] for h in out.hidden_states], dim=1))
        rows.append(nxt, logp, stop_ids, boundary_fn)
        if all(rows.done):
            break
    # split the batch cache back into per-row caches (real slots only)
    keys = [(layer.keys, layer.values) for layer in cache.layers]
    hall = torch.stack(hids, 0) if hids else None  # [T, B, L+1, d]
    return [_step_output(states[b], b, rows, mask[b], keys, hall, att_max, header_fn, header_end_id,
                         capture_attentions) for b in range(B)]


def _check_options(model: torch.nn.Module, header_fn, header_end_id, capture_attentions: bool) -> None:
    if header_fn is not None and header_end_id is not None:
        raise ValueError("pass header_end_id or header_fn, not both")
    if capture_attentions and getattr(model.config, "_attn_implementation", None) != "eager":
        raise ValueError("capture_attentions needs a model loaded with attn_implementation='eager' "
                         f"(this one uses '{getattr(model.config, '_attn_implementation', None)}')")


@dataclass
class _Rows:
    """What the decode loop has generated per row so far: token ids, their logprob / entropy / max probability,
    and whether the row is done (``finished``: by an end token or the boundary, not cut by ``max_new_tokens``)."""

    gen: list[list[int]]
    lp: list[list[float]]
    ent: list[list[float]]
    mp: list[list[float]]
    done: list[bool]
    finished: list[bool]

    @classmethod
    def of(cls, n: int) -> _Rows:
        return cls([[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)],
                   [False] * n, [False] * n)

    def feed(self, mask: torch.Tensor, pos: torch.Tensor, pad_id: int, device: torch.device):
        """``(active, input_ids, mask, pos)`` of the next decode pass: each active row's last token; finished rows
        get masked padding."""
        B, done = len(self.gen), self.done
        active = torch.tensor([not d for d in done], device=device)
        input_ids = torch.tensor([[pad_id if done[b] else self.gen[b][-1]] for b in range(B)],
                                 dtype=torch.long, device=device)
        step_mask = torch.tensor([[0 if done[b] else 1] for b in range(B)], dtype=torch.long, device=device)
        return active, input_ids, torch.cat([mask, step_mask], dim=1), pos[:, -1:] + 1

    def append(self, nxt: torch.Tensor, logp: torch.Tensor, stop_ids: set[int], boundary_fn) -> None:
        """Record each active row's next token and its signals; a stop token (or the boundary) ends the row."""
        p = logp.exp()
        entropy = -(p * logp).sum(-1)
        chosen = logp.gather(1, nxt[:, None]).squeeze(1)
        maxp = p.max(-1).values
        nxt_l, chosen_l, ent_l, maxp_l = nxt.tolist(), chosen.tolist(), entropy.tolist(), maxp.tolist()
        for b in range(len(self.gen)):
            if self.done[b]:
                continue
            tok = nxt_l[b]
            self.lp[b].append(chosen_l[b])
            self.ent[b].append(ent_l[b])
            self.mp[b].append(maxp_l[b])
            self.gen[b].append(tok)
            if tok in stop_ids:
                self.done[b] = self.finished[b] = True
            elif boundary_fn is not None:
                k = boundary_fn(b, self.gen[b])
                if k is not None:
                    if not 1 <= k < len(self.gen[b]):
                        raise ValueError(f"boundary_fn returned {k} for a step of {len(self.gen[b])} tokens")
                    for seq in (self.gen[b], self.lp[b], self.ent[b], self.mp[b]):
                        del seq[k:]
                    self.done[b] = self.finished[b] = True


def _attention_received(att_max: torch.Tensor | None, last_layer: torch.Tensor, base: int, t: int,
                        active: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """The running max (over queries) of the head-mean attention each generated token received: the row of the
    token fed now (g_t) over the keys of g_1 … g_{t-1} (active rows only)."""
    rows = last_layer[:, :, -1, base: base + t - 1].float().mean(1)  # [B, t-1]: mean over heads
    if att_max is None:
        att_max = torch.zeros((last_layer.shape[0], max_new_tokens), device=last_layer.device)
    upd = torch.maximum(att_max[:, : t - 1], rows)
    att_max[:, : t - 1] = torch.where(active[:, None], upd, att_max[:, : t - 1])
    return att_max


def _banned_first(logits: torch.Tensor, stop_ids: set[int], no_stop_first: list[bool] | None) -> torch.Tensor:
    """The first token's logits with the stop tokens banned in the rows of ``no_stop_first`` (answer closing)."""
    if no_stop_first is None or not any(no_stop_first):
        return logits
    rows = torch.tensor([i for i, f in enumerate(no_stop_first) if f], device=logits.device)
    banned = torch.tensor(sorted(stop_ids), device=logits.device)
    pick = logits.clone()
    pick[rows[:, None], banned[None, :]] = -float("inf")
    return pick


def _next_tokens(pick: torch.Tensor, sample: bool, temperature: float, generator) -> torch.Tensor:
    """Greedy, or sampled (one RNG per row: Gumbel-max, so a row's sample does not depend on the batch it runs in
    — its RNG draws one uniform vector per position, used or not; one RNG: multinomial)."""
    if sample and isinstance(generator, (list, tuple)):
        u = torch.stack([torch.rand(pick.shape[1], generator=g) for g in generator]).to(pick.device)
        return (pick / max(temperature, 1e-6) - torch.log(-torch.log(u.clamp_min(1e-20)))).argmax(dim=-1)
    if sample:
        probs = torch.softmax(pick / max(temperature, 1e-6), dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return pick.argmax(dim=-1)


def _content_start(gen: list[int], header_fn, header_end_id: int | None) -> tuple[int, int]:
    """``(header_len, start)``: the line header's length and where the content starts in a row's ids."""
    n = len(gen)
    if header_fn is not None:
        header_len = start = min(max(int(header_fn(list(gen))), 0), n)
    elif header_end_id is None:
        header_len = start = 0
    elif header_end_id in gen:
        header_len = start = gen.index(header_end_id) + 1
    else:  # no header end: no content
        header_len, start = 0, n
    return header_len, start


def _step_output(state: GenState, b: int, rows: _Rows, mask_b: torch.Tensor, keys: list, hall: torch.Tensor | None,
                 att_max: torch.Tensor | None, header_fn, header_end_id: int | None,
                 capture_attentions: bool) -> StepOutput:
    """Row ``b``'s step: its signals sliced to the content, its own KV cache (real slots only)."""
    gen = rows.gen[b]
    new_ids = state.ids + gen
    # the cache holds every fed token: the pending ones and all generated tokens but the last (a step cut by
    # boundary_fn fed tokens it dropped: its cache ends with its own last token but one)
    n_cached = len(new_ids) - 1
    real = mask_b.nonzero().squeeze(1)[:n_cached]
    row_cache = [(k[b][:, real], v[b][:, real]) for k, v in keys]
    assert row_cache[0][0].shape[1] == n_cached, (row_cache[0][0].shape, n_cached)
    n = len(gen)
    header_len, start = _content_start(gen, header_fn, header_end_id)
    hm = hl = hf = tt = None
    if hall is not None and start < n:
        h = hall[start:n, b]
        hm = h.mean(0).float().cpu().numpy()
        hl = h[-1].float().cpu().numpy()
        tt = token_transitions(h)
    if hall is not None:
        hf = hall[0, b].float().cpu().numpy()
    attn = None
    if capture_attentions:
        n_content = n - 1 if rows.finished[b] else n
        attn = (att_max[b, start:n_content].cpu().numpy().astype(np.float32) if att_max is not None
                else np.zeros(max(n_content - start, 0), dtype=np.float32))
    return StepOutput(
        ids=gen, header_len=header_len,
        logprobs=np.asarray(rows.lp[b][start:], dtype=np.float32),
        entropies=np.asarray(rows.ent[b][start:], dtype=np.float32),
        maxprobs=np.asarray(rows.mp[b][start:], dtype=np.float32), hidden_mean=hm, hidden_last=hl,
        hidden_first=hf, finished=rows.finished[b], state=GenState(new_ids, row_cache, n_cached), attn_received=attn,
        token_transitions=tt,
    )


def perplexity(logprobs: np.ndarray) -> float:
    """exp(mean NLL) of a step's tokens."""
    return float(math.exp(-float(np.mean(logprobs)))) if len(logprobs) else float("nan")
