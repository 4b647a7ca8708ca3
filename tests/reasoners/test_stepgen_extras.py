"""stepgen extensions for real LMs: a callable header rule and DRAGIN's attention capture."""

import numpy as np
import pytest
import torch

from agents.reasoners.stepgen import GenState, generate_steps

STOP, PAD = {3, 1}, 0
PROMPTS = [[7, 8, 9, 10], [11, 12], [13, 14, 15, 16, 17, 18], [4]]


def _gen(model, states, **kw):
    kw.setdefault("header_end_id", None)
    return generate_steps(model, states, stop_ids=STOP, pad_id=PAD, max_new_tokens=kw.pop("max_new_tokens", 8),
                          **kw)


def _ref_attention(model, prompt, out):
    """attn_received from a separate eager forward pass over prompt + step (the module's definition)."""
    ref = model(torch.tensor([prompt + out.ids]), output_attentions=True)
    att = ref.attentions[-1][0]  # [H, T, T], last layer
    n = len(out.ids)
    n_content = n - 1 if out.finished else n
    fed = n - 1  # generated tokens fed in the call (all but the last)
    vals = []
    for i in range(out.header_len, n_content):
        later = [len(prompt) + j for j in range(i + 1, fed)]
        col = len(prompt) + i
        vals.append(att[:, later, col].mean(dim=0).max().item() if later else 0.0)  # DRAGIN: head mean, then max
    return np.asarray(vals)


def test_header_fn_slices_the_content_signals(random_model):
    plain = _gen(random_model, [GenState(p) for p in PROMPTS], max_new_tokens=10)
    cut = _gen(random_model, [GenState(p) for p in PROMPTS], header_fn=lambda ids: 2, max_new_tokens=10)
    assert {len(o.ids) for o in plain} > {2, 10}  # rows that stop early and rows cut at the cap
    for p, a, b in zip(PROMPTS, plain, cut):
        assert a.ids == b.ids and b.header_len == min(2, len(a.ids))
        np.testing.assert_allclose(a.logprobs[b.header_len:], b.logprobs, atol=1e-6)
        np.testing.assert_allclose(a.entropies[b.header_len:], b.entropies, atol=1e-6)
        if len(a.ids) <= 2:
            assert b.hidden_mean is None and len(b.logprobs) == 0
            continue
        # pooled over the positions that generated the content tokens (after the 2 header tokens)
        ref = random_model(torch.tensor([p + a.ids]), output_hidden_states=True)
        hs = torch.stack([h[0] for h in ref.hidden_states], 0)
        pos = list(range(len(p) - 1 + 2, len(p) - 1 + len(a.ids)))
        np.testing.assert_allclose(hs[:, pos].mean(1).detach().numpy(), b.hidden_mean, atol=1e-5)
        np.testing.assert_allclose(hs[:, pos[-1]].detach().numpy(), b.hidden_last, atol=1e-5)


def test_header_fn_and_header_end_id_are_exclusive(random_model):
    with pytest.raises(ValueError, match="not both"):
        _gen(random_model, [GenState([7])], header_end_id=5, header_fn=lambda ids: 0)


def test_attention_capture_needs_eager(random_model):
    with pytest.raises(ValueError, match="eager"):
        _gen(random_model, [GenState([7, 8])], capture_attentions=True)


def test_attention_received_matches_a_separate_eager_pass(eager_model):
    outs = _gen(eager_model, [GenState(p) for p in PROMPTS], capture_attentions=True, max_new_tokens=10,
                header_fn=lambda ids: 1)
    assert any(len(o.attn_received) >= 3 for o in outs)
    from agents.signals.attention import attention_received

    for p, o in zip(PROMPTS, outs):
        np.testing.assert_allclose(o.attn_received, _ref_attention(eager_model, p, o), atol=1e-5)
        if len(o.attn_received):
            assert o.attn_received[-1] == 0.0  # the last content token: no later fed position
        # one definition: the signal module's attention_received over the positions this pass fed
        fed = len(p) + len(o.ids) - 1  # positions fed as queries: 0 … fed-1 (the last generated token is not)
        att = eager_model(torch.tensor([p + o.ids]), output_attentions=True).attentions[-1][0].clone()
        att[:, fed:, :] = 0.0
        n_content = len(o.ids) - 1 if o.finished else len(o.ids)
        positions = [len(p) + i for i in range(o.header_len, n_content)]
        np.testing.assert_allclose(o.attn_received, attention_received(att.detach().numpy(), positions), atol=1e-5)


def test_attention_from_a_cached_prefix_and_batched_equals_unbatched(eager_model):
    first = _gen(eager_model, [GenState(p) for p in PROMPTS], max_new_tokens=6)
    conts = [o.state.extend([20, 21]) for o in first]
    batch = _gen(eager_model, conts, capture_attentions=True, max_new_tokens=10)
    for c, o in zip(conts, batch):
        single = _gen(eager_model, [c], capture_attentions=True, max_new_tokens=10)[0]
        assert single.ids == o.ids
        np.testing.assert_allclose(single.attn_received, o.attn_received, atol=1e-5)
        np.testing.assert_allclose(o.attn_received, _ref_attention(eager_model, c.ids, o), atol=1e-5)


def test_attention_capture_does_not_change_generation(eager_model):
    a = _gen(eager_model, [GenState(p) for p in PROMPTS])
    b = _gen(eager_model, [GenState(p) for p in PROMPTS], capture_attentions=True)
    for x, y in zip(a, b):
        assert x.ids == y.ids and x.attn_received is None and y.attn_received is not None
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-6)
        np.testing.assert_allclose(x.hidden_mean, y.hidden_mean, atol=1e-6)


def test_token_transitions_are_each_content_positions_layer_transitions(random_model):
    """``token_transitions``: PUlSE's magnitude / angle of every layer pair at each position that generated a content
    token (the positions hidden_mean pools), from the same pass — a separate forward pass gives the same numbers."""
    from agents.signals.hidden import transitions

    cut = _gen(random_model, [GenState(p) for p in PROMPTS], header_fn=lambda ids: 2, max_new_tokens=10)
    seen = 0
    for p, b in zip(PROMPTS, cut):
        if b.hidden_mean is None:
            assert b.token_transitions is None
            continue
        ref = random_model(torch.tensor([p + b.ids]), output_hidden_states=True)
        hs = torch.stack([h[0] for h in ref.hidden_states], 0)  # [L+1, T, d]
        pos = list(range(len(p) - 1 + 2, len(p) - 1 + len(b.ids)))
        m, theta = transitions(hs[:, pos].transpose(0, 1).detach().numpy())  # per position: [T, L] each
        assert b.token_transitions.shape == (len(pos), 2, hs.shape[0] - 1)
        np.testing.assert_allclose(b.token_transitions[:, 0], m, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(b.token_transitions[:, 1], theta, atol=2e-3)
        seen += 1
    assert seen >= 2
