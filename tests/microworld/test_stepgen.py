"""The step generator: batching, KV-cache reuse, and signals identical to a separate forward pass."""

import numpy as np
import pytest
import torch

from agents.reasoners.microlm import build_model
from agents.reasoners.stepgen import GenState, generate_steps
from envs.core.microworld.config import ModelConfig

STOP, COLON, PAD = {3, 1}, 5, 0


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = build_model(ModelConfig(n_layers=2, hidden=32, heads=2, intermediate=64), 24, PAD, 1).eval()
    # make the random model produce varied tokens, a header ':' and stops: bias the output layer
    with torch.no_grad():
        m.model.embed_tokens.weight.mul_(4.0)
    return m


def _gen(model, states, **kw):
    return generate_steps(model, states, stop_ids=STOP, header_end_id=kw.pop("header", None), pad_id=PAD,
                          max_new_tokens=kw.pop("max_new_tokens", 8), **kw)


PROMPTS = [[7, 8, 9, 10], [11, 12], [13, 14, 15, 16, 17, 18], [4]]


def test_batched_equals_unbatched(model):
    batch = _gen(model, [GenState(p) for p in PROMPTS])
    for p, o in zip(PROMPTS, batch):
        single = _gen(model, [GenState(p)])[0]
        assert single.ids == o.ids
        np.testing.assert_allclose(single.logprobs, o.logprobs, atol=1e-5)
        np.testing.assert_allclose(single.hidden_mean, o.hidden_mean, atol=1e-5)


def test_signals_match_a_separate_forward_pass(model):
    for p, o in zip(PROMPTS, _gen(model, [GenState(p) for p in PROMPTS])):
        full = torch.tensor([p + o.ids])
        ref = model(full, output_hidden_states=True)
        hs = torch.stack([h[0] for h in ref.hidden_states], 0)  # [L+1, T, d]
        start = len(p) - 1  # the position that generated the first token
        pos = list(range(start, start + len(o.ids)))
        np.testing.assert_allclose(hs[:, pos].mean(1).detach().numpy(), o.hidden_mean, atol=1e-5)
        np.testing.assert_allclose(hs[:, pos[-1]].detach().numpy(), o.hidden_last, atol=1e-5)
        lp = torch.log_softmax(ref.logits[0].float(), -1)
        ref_lp = [lp[start + i, t].item() for i, t in enumerate(o.ids)]
        np.testing.assert_allclose(ref_lp, o.logprobs, atol=1e-5)
        probs = lp.exp()
        ref_ent = [-(probs[start + i] * lp[start + i]).sum().item() for i in range(len(o.ids))]
        np.testing.assert_allclose(ref_ent, o.entropies, atol=1e-5)


def test_header_excluded_from_content_signals(model):
    # force a header: prompt ends so that generation continues; check content starts after ':' (id 5)
    o = _gen(model, [GenState([2, 6])], header=COLON, max_new_tokens=10)[0]
    if COLON in o.ids:
        h = o.ids.index(COLON) + 1
        assert o.header_len == h and len(o.logprobs) == len(o.ids) - h
    else:
        assert o.header_len == 0 and len(o.logprobs) == 0 and o.hidden_mean is None


def test_continuing_from_a_cached_state_equals_a_fresh_prefill(model):
    first = _gen(model, [GenState(p) for p in PROMPTS])
    cont = _gen(model, [o.state.extend([20, 21]) for o in first], max_new_tokens=5)
    fresh = _gen(model, [GenState(p + o.ids + [20, 21]) for p, o in zip(PROMPTS, first)], max_new_tokens=5)
    for c, f, o in zip(cont, fresh, first):
        assert o.state.n_cached == len(o.state.ids) - 1  # the stop token is pending, not cached
        assert c.ids == f.ids
        np.testing.assert_allclose(c.logprobs, f.logprobs, atol=1e-5)
        np.testing.assert_allclose(c.hidden_mean, f.hidden_mean, atol=1e-5)


def test_sampling_is_seeded(model):
    a = _gen(model, [GenState([7, 8])] * 4, sample=True, generator=torch.Generator().manual_seed(1))
    b = _gen(model, [GenState([7, 8])] * 4, sample=True, generator=torch.Generator().manual_seed(1))
    assert [x.ids for x in a] == [x.ids for x in b]


def test_state_without_pending_token_is_an_error(model):
    o = _gen(model, [GenState([7, 8])])[0]
    empty = GenState(o.state.ids, o.state.cache, len(o.state.ids))
    with pytest.raises(ValueError, match="no pending token"):
        _gen(model, [empty])
