"""Every docs/design.md §4 formula on tiny tensors computed by hand."""

import math

import numpy as np
import pytest

from agents.reasoners.base import Step
from agents.signals import (
    PPL,
    RIND,
    CoEC,
    CoER,
    EigenScore,
    Entropy,
    MaxProb,
    MinProb,
    OutputGroup,
    Pulse,
    ReProbeInput,
    SignalUnavailable,
    attention_received,
    coe_scores,
    default_interval,
    eigenscore,
    pulse_features,
    rind_scores,
    transitions,
)

H3 = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]])  # m = [sqrt 2, 1], theta = [pi/2, 0]


def _step(**kw):
    return Step(index=kw.pop("index", 1), text="Step 1 : x", content="x", is_answer=False, **kw)


# ------------------------------------------------------------------ PUlSE
def test_pulse_hand_computed():
    np.testing.assert_allclose(pulse_features(H3, (0, 2)), [math.sqrt(2), 1.0, math.pi / 2, 0.0], atol=1e-6)
    np.testing.assert_allclose(pulse_features(H3, (0, 2), "magnitude"), [math.sqrt(2), 1.0], atol=1e-6)
    np.testing.assert_allclose(pulse_features(H3, (0, 2), "angle"), [math.pi / 2, 0.0], atol=1e-6)


def test_pulse_interval_selects_transitions_a_to_b_minus_1():
    h = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0], [0.0, -2.0]])
    np.testing.assert_allclose(pulse_features(h, (1, 3)), [1.0, 4.0, 0.0, math.pi], atol=1e-6)  # opposite: pi
    np.testing.assert_allclose(pulse_features(h, (2, 3)), [4.0, math.pi], atol=1e-6)
    assert pulse_features(h).shape == (6,)  # default = whole stack [0, L]


def test_pulse_cosine_is_clipped_and_zero_vector_convention():
    h = np.array([[1e8, 1e8], [1e8 + 1e-3, 1e8]])  # cos rounds to just above 1 in float arithmetic
    m, theta = transitions(h)
    assert np.isfinite(theta).all() and theta[0] >= 0
    _, theta0 = transitions(np.array([[0.0, 0.0], [1.0, 0.0]]))
    assert theta0[0] == pytest.approx(math.pi / 2)


def test_pulse_batch_axes_match_per_row():
    rng = np.random.default_rng(0)
    H = rng.normal(size=(5, 7, 4))
    batch = pulse_features(H, (1, 5))
    for i in range(5):
        np.testing.assert_allclose(batch[i], pulse_features(H[i], (1, 5)), atol=1e-6)
    assert batch.shape == (5, 8)


def test_pulse_signal_pooling_and_interval_checks():
    last = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 0.0]])
    s = _step(hidden_mean=H3, hidden_last=last)
    np.testing.assert_allclose(Pulse(layers=(0, 2))(s), pulse_features(H3, (0, 2)))
    np.testing.assert_allclose(Pulse(layers=(0, 2), pooling="last")(s), [math.sqrt(2), 1, math.pi / 2, 0], atol=1e-6)
    assert Pulse(layers=(7, 25)).dim == 36 and Pulse(layers=(7, 25), parts="angle").dim == 18
    assert Pulse(n_layers=28).layers == (7, 25)
    with pytest.raises(ValueError, match="outside the model's rows"):
        Pulse(layers=(0, 3))(s)
    with pytest.raises(ValueError, match="outside"):
        Pulse(layers=(1, 7), n_layers=6)
    with pytest.raises(ValueError, match="pooling"):
        Pulse(layers=(0, 2), pooling="median")
    with pytest.raises(SignalUnavailable):
        Pulse(layers=(0, 2))(_step())


def test_default_interval():
    assert default_interval(28) == (7, 25)
    assert default_interval(32, "meta-llama/Llama-3.1-8B-Instruct") == (6, 31)
    assert default_interval(28, "Qwen/Qwen2.5-7B-Instruct") == (7, 25)
    a, b = default_interval(2)
    assert 0 <= a < b <= 2


# ------------------------------------------------------------------ CoE
def test_coe_hand_computed():
    M = np.array([math.sqrt(2), 1.0]) / math.sqrt(5)  # ||h_L - h_0|| = ||(-1, 2)|| = sqrt 5
    A = np.array([1.0, 0.0])  # (pi/2, 0) / angle(h_0, h_L) = pi/2
    r, c = coe_scores(H3)
    assert r == pytest.approx(M.mean() - A.mean())
    assert c == pytest.approx(math.hypot((M * np.cos(A)).mean(), (M * np.sin(A)).mean()))
    s = _step(hidden_mean=H3)
    assert CoER()(s)[0] == pytest.approx(r, rel=1e-6) and CoEC()(s)[0] == pytest.approx(c, rel=1e-6)
    rb, cb = coe_scores(np.stack([H3, H3 * 2]))  # batch axis; CoE is scale invariant
    np.testing.assert_allclose(rb, [r, r])
    np.testing.assert_allclose(cb, [c, c])


# ------------------------------------------------------------------ EigenScore
def test_eigenscore_hand_computed_and_equal_to_explicit_J():
    Z = np.array([[1.0, -1.0], [-1.0, 1.0]])  # Z J Zᵀ = [[2, -2], [-2, 2]]: eigenvalues 4, 0
    alpha = 1e-3
    assert eigenscore(Z, alpha) == pytest.approx((math.log(4 + alpha) + math.log(alpha)) / 2)
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(4, 6))
    d = Z.shape[1]
    J = np.eye(d) - np.ones((d, d)) / d
    explicit = np.linalg.slogdet(Z @ J @ Z.T + alpha * np.eye(4))[1] / 4
    assert eigenscore(Z) == pytest.approx(explicit)


def test_eigenscore_centres_each_row_over_features_not_samples():
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(3, 5))
    shifted_rows = Z + np.array([[1.0], [-2.0], [5.0]])  # a constant added to every feature of a sample
    assert eigenscore(shifted_rows) == pytest.approx(eigenscore(Z))
    common = Z + rng.normal(size=(1, 5))  # the same vector added to every sample: NOT invariant
    assert eigenscore(common) != pytest.approx(eigenscore(Z))
    same = np.tile(Z[:1], (3, 1))  # identical samples: rank 1, low score; diverse samples score higher
    assert eigenscore(same) < eigenscore(Z)


def test_eigenscore_signal_reads_meta_or_callable():
    Z = np.array([[1.0, -1.0], [-1.0, 1.0]])
    assert EigenScore()(_step(meta={"eigen_states": Z}))[0] == pytest.approx(eigenscore(Z), rel=1e-6)
    assert EigenScore(states_fn=lambda step, state: Z)(_step())[0] == pytest.approx(eigenscore(Z), rel=1e-6)
    with pytest.raises(SignalUnavailable):
        EigenScore()(_step())


# ------------------------------------------------------------------ ReProbe input
def test_reprobe_input_is_all_layers_last_token():
    last = np.arange(6, dtype=np.float32).reshape(3, 2)
    v = ReProbeInput(n_layers=2, hidden_size=2)(_step(hidden_mean=H3, hidden_last=last))
    np.testing.assert_array_equal(v, [0, 1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="shape"):
        ReProbeInput(n_layers=3, hidden_size=2)(_step(hidden_last=last))


# ------------------------------------------------------------------ output level
def test_output_signals_hand_computed():
    s = _step(logprobs=np.log([0.5, 0.25, 0.8]), maxprobs=np.array([0.5, 0.7, 0.9]),
              entropies=np.array([1.0, 2.0, 0.3]))
    assert PPL()(s)[0] == pytest.approx(0.1 ** (-1 / 3), rel=1e-6)  # content + end token
    assert PPL(include_end=False)(s)[0] == pytest.approx(math.sqrt(8), rel=1e-6)
    assert MaxProb()(s)[0] == pytest.approx(0.7) and MaxProb(include_end=False)(s)[0] == pytest.approx(0.6)
    assert Entropy()(s)[0] == pytest.approx(1.1) and Entropy(include_end=False)(s)[0] == pytest.approx(1.5)
    assert MinProb()(s)[0] == pytest.approx(0.25)
    np.testing.assert_allclose(OutputGroup()(s), [0.1 ** (-1 / 3), 0.7, 1.1, 0.25], rtol=1e-6)
    with pytest.raises(SignalUnavailable):
        PPL()(_step(logprobs=np.array([])))
    with pytest.raises(SignalUnavailable):
        MinProb()(_step())


# ------------------------------------------------------------------ DRAGIN RIND
def test_attention_received_and_rind_hand_computed():
    A = np.array([[[1.0, 0, 0], [0.6, 0.4, 0], [0.2, 0.5, 0.3]],
                  [[1.0, 0, 0], [0.2, 0.8, 0], [0.4, 0.1, 0.5]]])  # 2 heads; mean = [[1,0,0],[.4,.6,0],[.3,.3,.4]]
    a = attention_received(A, [0, 1, 2])
    np.testing.assert_allclose(a, [0.4, 0.3, 0.0])  # max over later queries; the last token receives 0
    s = rind_scores(a, np.array([1.0, 2.0, 3.0, 9.0]))  # the 4th entropy (end token) is ignored
    np.testing.assert_allclose(s, [0.4 / 0.7 * 1 * 3, 0.3 / 0.7 * 2 * 3, 0.0])
    np.testing.assert_allclose(rind_scores(np.zeros(2), np.array([1.0, 4.0])), [1.0, 4.0])  # uniform fallback
    step = _step(entropies=np.array([1.0, 2.0, 3.0]), meta={"attn_received": a})
    assert RIND()(step)[0] == pytest.approx(s.max())
    assert RIND.requires == ("attentions", "logprobs")
    with pytest.raises(SignalUnavailable):
        RIND()(_step(entropies=np.ones(2)))


def test_rind_scores_only_content_words_as_dragin():
    from agents.signals.attention import content_token_mask

    toks = [" Paris", " is", " the", " capital", " of", " France", ".", " It", " has", " 2", " mill", "ion", " people"]
    keep = content_token_mask(toks)
    assert [t for t, k in zip(toks, keep) if k] == [" Paris", " capital", " France", " 2", " mill", "ion", " people"]
    # the function word " is" has the highest raw score; DRAGIN's filter skips it
    a = np.array([0.1, 0.9, 0.1, 0.2])
    step = _step(entropies=np.array([1.0, 3.0, 1.0, 1.0, 0.0]),
                 meta={"attn_received": a, "token_texts": [" Paris", " is", " the", " capital"]})
    s = rind_scores(a, step.entropies)
    assert s.argmax() == 1 and RIND()(step)[0] == pytest.approx(max(s[0], s[3]))
    only_function = _step(entropies=np.ones(3), meta={"attn_received": np.ones(2), "token_texts": [" the", " of"]})
    assert RIND()(only_function)[0] == 0.0


def test_qfs_terms_hand_computed_as_dragin_real_words():
    """DRAGIN's QFS: the trigger token (highest RIND content token of the step), the attention its word pays to
    earlier tokens (row of the query that generated each of its tokens, normalised over keys before the word,
    averaged, summed per word), the top-k content words in original order, the trigger word and unscorable
    tokens (headers) excluded."""
    from agents.signals.attention import qfs_terms

    toks = [" Question", " :", " Paris", " is", " in", " France", " \n", " Step", " :", " The", " Eiffel", " To", "wer"]
    T = len(toks)
    scorable = np.array([False, False, True, True, True, True, False, False, False, True, True, True, True])
    A = np.full((T, T), 0.0)
    for q in range(T):  # causal rows: uniform, then make the trigger word's queries favour "France"
        A[q, : q + 1] = 1.0 / (q + 1)
    A[9, :] = 0.0
    A[9, [2, 5, 9]] = [0.1, 0.6, 0.3]       # query 9 generates " Eiffel" (pos 10): France gets most
    A[10, :] = 0.0
    A[10, [2, 5, 8, 10]] = [0.3, 0.3, 0.1, 0.3]  # query 10 generates " To" (pos 11), part of the same word
    A[11, :] = 0.0
    A[11, [10, 11]] = [0.5, 0.5]
    ent = np.zeros(T)
    ent[[10, 11, 12]] = [5.0, 1.0, 1.0]     # " Eiffel" uncertain: with its attention, the trigger token
    step_positions = [9, 10, 11, 12]
    terms = qfs_terms(A, toks, scorable, step_positions, ent, keep_top_k=2)
    # RIND over the step's content tokens 9-12: ā ∝ [1/13, .5, 1/13, 0] · H [0, 5, 1, 1] -> token 10 (" Eiffel")
    # is the trigger; " To" starts a new word ("Tower", tokens 11-12). The trigger word's row (query 9) over the
    # keys before it, normalised: Paris .1, France .6, The .3 (not a content word); Tower 0 (after it)
    # -> top 2 = France, Paris, in their original order
    assert terms == ["Paris", "France"]
    assert qfs_terms(A, toks, scorable, step_positions, ent, keep_top_k=1) == ["France"]
    with pytest.raises(ValueError, match="must agree"):
        qfs_terms(A[:3, :3], toks, scorable, step_positions, ent)


def test_micro_sample_states_from_a_generation_pass():
    from types import SimpleNamespace

    import torch

    from agents.reasoners.microlm import build_model
    from agents.reasoners.stepgen import GenState
    from agents.signals import micro_sample_states
    from envs.core.microworld.config import ModelConfig

    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=2, hidden=32, heads=2, intermediate=64), 24, 0, 1).eval()
    r = SimpleNamespace(model=model, stop_ids={1, 3}, colon_id=None, tok=SimpleNamespace(pad_id=0),
                        max_step_tokens=5, n_layers=2)
    state = SimpleNamespace(gen=GenState([7, 8, 9]))
    greedy = _step(hidden_last=np.ones((3, 32), dtype=np.float32))
    Z = micro_sample_states(r, state, k=4, seed=0, greedy=greedy)
    assert Z.shape == (5, 32) and np.array_equal(Z[-1], np.ones(32))
    np.testing.assert_array_equal(Z, micro_sample_states(r, state, k=4, seed=0, greedy=greedy))
    assert np.isfinite(EigenScore(states_fn=lambda s, st: Z)(greedy)).all()


def test_batched_eigen_samples_equal_each_state_alone():
    """micro_sample_states_batch: every state's k samples come from its own per-sample RNGs, so a batch of states
    (split over generation calls of any size) gives each state exactly what it gets alone — the env samples all
    new steps of a batch at once and the cache stays independent of the batch; the samples do differ by seed."""
    from types import SimpleNamespace

    import torch

    from agents.reasoners.microlm import build_model
    from agents.reasoners.stepgen import GenState
    from agents.signals.hidden import micro_sample_states, micro_sample_states_batch
    from envs.core.microworld.config import ModelConfig

    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=2, hidden=32, heads=2, intermediate=64), 24, 0, 1).eval()
    r = SimpleNamespace(model=model, stop_ids={1, 3}, colon_id=None, tok=SimpleNamespace(pad_id=0),
                        max_step_tokens=6, n_layers=2, max_batch=8)  # 8 rows a call: 2 states of k = 4
    states = [SimpleNamespace(gen=GenState(p)) for p in ([7, 8, 9], [5], [10, 11, 12, 13, 14], [6, 6])]
    batch = micro_sample_states_batch(r, states, k=4, seed=3)
    for s, Z in zip(states, batch):
        np.testing.assert_allclose(Z, micro_sample_states(r, s, k=4, seed=3), rtol=1e-5, atol=1e-6)
    assert not np.allclose(batch[0], micro_sample_states(r, states[0], k=4, seed=4))
