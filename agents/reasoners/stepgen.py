"""Batched, KV-cached step-by-step generation with signals captured from the SAME forward passes.

This is the engine under the micro-world reasoner (and any small transformers causal LM driven with
word-level steps). One call advances a batch of sequences by one *step* (one line): it feeds each
sequence's not-yet-cached tokens (prefill), then decodes greedily (or by sampling) until every row emits
an end-of-step token (newline or end-of-text).

Signals of a step, all from the generation passes (no second pass over the step):

* ``logprobs`` / ``entropies`` / ``maxprobs`` of the step's *content* tokens (everything after the line
  header ``Step k :`` / ``Answer :``) and of its end token;
* ``hidden_mean`` / ``hidden_last``: per-layer hidden states (``n_layers + 1`` rows, row 0 = embeddings)
  at the positions whose next-token prediction produced those tokens — i.e. the inputs ``:`` (the header's
  last token), ``c_1 … c_n`` (the content tokens). ``hidden_last`` is the position of ``c_n``, the state
  that decided the step was complete. A separate forward pass over ``context + step`` reproduces them
  exactly at positions ``len(context) + header_len - 1 … len(context) + len(step) - 2`` (tested).

Sequences keep their own KV cache (per layer, unpadded); a batch re-pads them on the left. Regenerating a
step in ``step`` mode appends evidence tokens after the cached prefix, so the prefix's cache is reused.
"""

from __future__ import annotations

import math
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
    finished: bool = True               # ended with an end token (not cut by max_new_tokens)
    state: GenState | None = field(default=None, repr=False)  # state after the step (for continuing)


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
) -> list[StepOutput]:
    """Advance every state by one step (one line) in a single batched decode loop.

    Args:
        model: a transformers causal LM (``past_key_values`` + ``output_hidden_states`` support).
        states: sequences to advance; each must have at least one uncached token.
        stop_ids: token ids that end a step (newline, end-of-text).
        header_end_id: token id that ends a line header (``:``); content starts after its first occurrence.
        pad_id: padding token id.
        max_new_tokens: cut a step after this many tokens (``finished=False``).
        capture_hidden: pool per-layer hidden states (PUlSE / CoE / probes) during generation.
        sample: sample instead of greedy decoding (for k-sample consistency signals).
        temperature: sampling temperature.
        generator: torch RNG for sampling (seeded by the caller for reproducibility).
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    B = len(states)
    input_ids, mask, pos, past = _pad_left(states, pad_id, device)
    cache = DynamicCache(ddp_cache_data=past) if past is not None else DynamicCache()
    gen: list[list[int]] = [[] for _ in range(B)]
    lp: list[list[float]] = [[] for _ in range(B)]
    ent: list[list[float]] = [[] for _ in range(B)]
    mp: list[list[float]] = [[] for _ in range(B)]
    hsum: list[torch.Tensor | None] = [None] * B
    hcount = [0] * B
    hlast: list[torch.Tensor | None] = [None] * B
    in_content = [header_end_id is None] * B
    header_len = [0] * B
    done = [False] * B
    finished = [False] * B
    hid = None
    for t in range(max_new_tokens):
        if t > 0:  # feed each active row its last token; finished rows get masked padding
            input_ids = torch.tensor([[pad_id if done[b] else gen[b][-1]] for b in range(B)],
                                     dtype=torch.long, device=device)
            step_mask = torch.tensor([[0 if done[b] else 1] for b in range(B)], dtype=torch.long, device=device)
            mask = torch.cat([mask, step_mask], dim=1)
            pos = pos[:, -1:] + 1
        out = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, cache=cache, logits_to_keep=1,
                    use_cache=True, output_hidden_states=capture_hidden)
        cache = out.cache
        logits = out.logits[:, -1, :].float()
        logp = torch.log_softmax(logits, dim=-1)
        if sample:
            probs = torch.softmax(logits / max(temperature, 1e-6), dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            nxt = logp.argmax(dim=-1)
        p = logp.exp()
        entropy = -(p * logp).sum(-1)
        chosen = logp.gather(1, nxt[:, None]).squeeze(1)
        maxp = p.max(-1).values
        hid = torch.stack([h[:, -1, :] for h in out.hidden_states], dim=1) if capture_hidden else None
        nxt_l, chosen_l, ent_l, maxp_l = nxt.tolist(), chosen.tolist(), entropy.tolist(), maxp.tolist()
        for b in range(B):
            if done[b]:
                continue
            tok = nxt_l[b]
            if in_content[b]:
                lp[b].append(chosen_l[b])
                ent[b].append(ent_l[b])
                mp[b].append(maxp_l[b])
                if hid is not None:
                    hsum[b] = hid[b].clone() if hsum[b] is None else hsum[b] + hid[b]
                    hcount[b] += 1
                    hlast[b] = hid[b].clone()
            gen[b].append(tok)
            if not in_content[b] and tok == header_end_id:
                in_content[b] = True
                header_len[b] = len(gen[b])
            if tok in stop_ids:
                done[b] = finished[b] = True
        if all(done):
            break
    # split the batch cache back into per-row caches (real slots only)
    results: list[StepOutput] = []
    keys = [(layer.keys, layer.values) for layer in cache.layers]
    for b in range(B):
        real = mask[b].nonzero().squeeze(1)
        new_ids = states[b].ids + gen[b]
        # the cache holds every fed token: the pending ones and all generated tokens but the last
        row_cache = [(k[b][:, real], v[b][:, real]) for k, v in keys]
        n_cached = len(new_ids) - 1
        assert row_cache[0][0].shape[1] == n_cached, (row_cache[0][0].shape, n_cached)
        hm = (hsum[b] / max(hcount[b], 1)).float().cpu().numpy() if hsum[b] is not None else None
        hl = hlast[b].float().cpu().numpy() if hlast[b] is not None else None
        results.append(StepOutput(
            ids=gen[b], header_len=header_len[b],
            logprobs=np.asarray(lp[b], dtype=np.float32), entropies=np.asarray(ent[b], dtype=np.float32),
            maxprobs=np.asarray(mp[b], dtype=np.float32), hidden_mean=hm, hidden_last=hl,
            finished=finished[b], state=GenState(new_ids, row_cache, n_cached),
        ))
    return results


def perplexity(logprobs: np.ndarray) -> float:
    """exp(mean NLL) of a step's tokens."""
    return float(math.exp(-float(np.mean(logprobs)))) if len(logprobs) else float("nan")
