"""The transformers reasoner on tiny models built here: steps, headers, batching, signals, cache reuse."""

import numpy as np
import pytest
import torch

from agents.reasoners.base import Reasoner
from agents.reasoners.hf import (
    HFReasoner,
    HFReasonerConfig,
    HFState,
    header_token_len,
    load_causal_lm,
    model_cache_dir,
    newline_stop_ids,
)
from envs.core.config import ConfigError

QUESTIONS = ["Paris is the capital ?", "a b c d e f g h ?", "x ?"]


def _with_pending(r: HFReasoner, word: str, question: str = "x ?") -> HFState:
    """A fresh state whose last prompt token is ``word`` (steers the scripted bigram model)."""
    s = r.start(question)
    return HFState(s.question, s.front, s.transcript, 0, s.gen.extend([r.tok.convert_tokens_to_ids(word)]))


@pytest.fixture(scope="module")
def scripted(tok, scripted_model):
    return HFReasoner(scripted_model, tok, HFReasonerConfig(max_steps=3, max_step_tokens=8))


def test_it_is_a_reasoner_and_stops_on_newline_and_eos(tok, scripted):
    assert isinstance(scripted, Reasoner)
    assert scripted.capabilities.hidden_states and scripted.capabilities.logprobs
    assert not scripted.capabilities.attentions
    assert newline_stop_ids(tok) == {tok.convert_tokens_to_ids("\n"), tok.eos_token_id}


def test_capabilities_follow_the_attention_implementation(tok, scripted_eager_model, scripted):
    eager = HFReasoner(scripted_eager_model, tok, HFReasonerConfig(max_step_tokens=8,
                                                                   attn_implementation="eager"))
    assert eager.capabilities.attentions  # eager: attentions captured by default
    (step, _), = eager.next_step([eager.start("x ?")])
    assert step.meta["attn_received"].shape == (len(step.logprobs) - 1,)  # content tokens, no end token
    eager.cfg.capture_attentions = False
    assert not eager.capabilities.attentions
    (step, _), = eager.next_step([eager.start("x ?")])
    assert "attn_received" not in step.meta
    eager.cfg.capture_hidden = False
    assert not eager.capabilities.hidden_states and eager.capabilities.logprobs
    (step, _), = eager.next_step([eager.start("x ?")])
    assert step.hidden_mean is None and step.logprobs is not None


def test_steps_headers_and_max_steps(scripted):
    chain = scripted.run_chains([QUESTIONS[0]])[0]
    assert [s.text for s in chain] == ["Step 1 : a b"] * 3  # the scripted model never answers: max_steps
    st = chain[0]
    assert st.content == "a b" and not st.is_answer and st.finished
    assert st.meta["header_tokens"] == 3 and len(st.logprobs) == 3  # 'a', 'b' and the newline
    assert st.pieces == ["a", " b"]  # what each content token adds to the line (FLARE's masked query)
    assert st.hidden_mean.shape == (3, 32) and st.n_tokens == 6
    assert np.all(st.logprobs < 0) and np.all(st.entropies > 0)


def test_answer_line_ends_the_episode(scripted):
    (step, s), = scripted.next_step([_with_pending(scripted, "x")])
    assert step.is_answer and step.text == "Answer : a b" and step.content == "a b" and s.done
    with pytest.raises(ValueError, match="finished state"):
        scripted.next_step([s])


def test_runaway_step_is_cut_and_the_line_closed(scripted):
    (step, s), = scripted.next_step([_with_pending(scripted, "c")])
    assert not step.finished and step.n_tokens == 8 and step.meta["header_tokens"] == 0
    assert step.content == step.text == " ".join(["c"] * 8)
    assert s.gen.ids[-1] == scripted.tok.convert_tokens_to_ids("\n") and s.transcript[-1].endswith("\n")


def test_blank_line_is_not_a_step(scripted):
    (step, s), = scripted.next_step([_with_pending(scripted, "?")])  # '?' -> newline: a blank line first
    assert step.text == "Step 1 : a b" and step.meta["blank_tokens"] == 1 and step.n_tokens == 7
    assert s.n_steps == 1


def test_batched_equals_unbatched(tok, random_model):
    r = HFReasoner(random_model, tok, HFReasonerConfig(max_step_tokens=10, max_blank_retries=0))
    states = [r.start(q) for q in QUESTIONS]
    for _ in range(2):  # two rounds: the second continues from per-row caches of different lengths
        batch = r.next_step(states)
        for s, (b, _) in zip(states, batch):
            (one, _), = r.next_step([s])
            assert one.token_ids == b.token_ids and one.text == b.text
            np.testing.assert_allclose(one.logprobs, b.logprobs, atol=1e-5)
            if one.hidden_mean is not None:
                np.testing.assert_allclose(one.hidden_mean, b.hidden_mean, atol=1e-5)
        states = [s for _, s in batch if not s.done] or states


def test_signals_equal_a_separate_forward_pass(tok, scripted_eager_model):
    m = scripted_eager_model
    r = HFReasoner(m, tok, HFReasonerConfig(max_step_tokens=8, attn_implementation="eager",
                                            capture_attentions=True))
    assert r.capabilities.attentions
    s0 = r.start(QUESTIONS[0])
    (first, s1), = r.next_step([s0])
    (step, s2), = r.next_step([s1])  # from a cached prefix
    ctx = s1.gen.ids  # everything before the second step (the first step's newline included)
    full = torch.tensor([ctx + step.token_ids])
    ref = m(full, output_hidden_states=True, output_attentions=True)
    h = step.meta["header_tokens"]
    gen_pos = [len(ctx) - 1 + i for i in range(len(step.token_ids))]  # position that generated token i
    content = gen_pos[h:]
    hs = torch.stack([x[0] for x in ref.hidden_states], 0)
    np.testing.assert_allclose(hs[:, content].mean(1).detach().numpy(), step.hidden_mean, atol=1e-5)
    np.testing.assert_allclose(hs[:, content[-1]].detach().numpy(), step.hidden_last, atol=1e-5)
    lp = torch.log_softmax(ref.logits[0].float(), -1)
    ref_lp = [lp[p, t].item() for p, t in zip(content, step.token_ids[h:])]
    np.testing.assert_allclose(ref_lp, step.logprobs, atol=1e-5)
    # attention received by content token i: max over later fed step positions, mean over heads
    att = ref.attentions[-1][0]
    tok_pos = [len(ctx) + i for i in range(len(step.token_ids))]
    fed = tok_pos[:-1]
    exp = [att[:, [q for q in fed if q > p], p].max(1).values.mean().item() if any(q > p for q in fed) else 0.0
           for p in tok_pos[h:-1]]
    np.testing.assert_allclose(step.meta["attn_received"], exp, atol=1e-5)


def test_regenerate_step_mode_reuses_the_cache_and_equals_a_fresh_prefill(tok, random_model):
    r = HFReasoner(random_model, tok, HFReasonerConfig(max_step_tokens=10, max_blank_retries=0))
    states = [s for _, s in r.next_step([r.start(q) for q in QUESTIONS])]
    assert all(s.gen.n_cached == len(s.gen.ids) - 1 for s in states)  # the prefix stays cached
    ev = [["Paris is the capital"], ["a b"], ["x y", "z"]]
    regen = r.regenerate(states, ev, mode="step")
    for s, e, (step, new) in zip(states, ev, regen):
        ids = s.gen.ids + r._encode("".join(f"Evidence: {x}\n" for x in e))
        fresh = HFState(s.question, s.front, s.transcript, s.n_steps, type(s.gen)(ids))  # no cache: full prefill
        (ref, _), = r.next_step([fresh])
        assert step.token_ids == ref.token_ids
        np.testing.assert_allclose(step.logprobs, ref.logprobs, atol=1e-5)
        if step.hidden_mean is not None:
            np.testing.assert_allclose(step.hidden_mean, ref.hidden_mean, atol=1e-5)
        assert new.transcript[-2].startswith("Evidence: ") and new.n_steps == s.n_steps + 1


def test_regenerate_front_mode_re_encodes_with_evidence_first(tok, random_model):
    r = HFReasoner(random_model, tok, HFReasonerConfig(max_step_tokens=6))
    (_, s), = r.next_step([r.start("x ?")])
    (_, new), = r.regenerate([s], [["Paris is the capital"]], mode="front")
    assert new.front == ("Paris is the capital",)
    text = r.tok.decode(new.gen.ids)
    assert text.index("Paris is the capital") < text.index("x ?")
    with pytest.raises(ValueError, match="injection mode"):
        r.regenerate([s], [["a"]], mode="middle")


def test_sampling_is_seeded(tok, random_model):
    r = HFReasoner(random_model, tok, HFReasonerConfig(max_step_tokens=6))
    s = r.start("x ?")
    a, b = r.sample_alternatives(s, 4, seed=3), r.sample_alternatives(s, 4, seed=3)
    assert a == b and len(a) == 4
    # with the tokens they took (every sample at least its end token, at most the step budget)
    assert a.tokens == b.tokens and 4 <= a.tokens <= 4 * 6


def test_header_length_with_merged_bpe_tokens():
    """A byte-level BPE that merges ':' with neighbours (':**', ':The'): the header ends inside the text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    corpus = ["**Step 1:** Paris is big.\n", "Step 2: It is.\n", "Answer: Paris\n", "Step12:Paris\n"] * 50
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t = PreTrainedTokenizerFast(tokenizer_object=tk)
    for text, header in [("**Step 1:** Paris is big.\n", "**Step 1:**"), ("Step 2: It is.\n", "Step 2:"),
                         ("Answer: Paris\n", "Answer:"), ("Step12:Paris\n", "Step12:"), ("Paris is big.\n", "")]:
        ids = t.encode(text)
        k = header_token_len(t, ids)
        assert t.decode(ids[:k]).startswith(header) and (k == 0 or len(t.decode(ids[: k - 1])) < len(header))


def test_config_checks_and_model_paths(tmp_path, monkeypatch, tok, random_model):
    with pytest.raises(ConfigError, match="eager"):
        HFReasonerConfig.from_dict({"capture_attentions": True})
    with pytest.raises(ConfigError, match="dtype"):
        HFReasonerConfig.from_dict({"dtype": "float8"})
    with pytest.raises(ValueError, match="eager"):
        HFReasoner(random_model, tok, HFReasonerConfig(capture_attentions=True, attn_implementation="eager"))
    with pytest.raises(FileNotFoundError, match="not found; tried: a local folder or .gguf file .*no such path"):
        load_causal_lm(HFReasonerConfig(model=str(tmp_path / "Qwen2.5-7B-Instruct")))
    monkeypatch.setenv("KAIROS_MODEL_CACHE", str(tmp_path / "cache"))
    assert model_cache_dir() == tmp_path / "cache"
    # a local folder loads offline, in the configured dtype and attention
    random_model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    m, t = load_causal_lm(HFReasonerConfig(model=str(tmp_path / "tiny"), attn_implementation="eager"))
    assert m.config._attn_implementation == "eager" and len(t) == len(tok)
    assert not m.training


def test_hf_reasoner_continues_after_the_written_answer_prompt(tok, scripted_model):
    r = HFReasoner(scripted_model, tok, HFReasonerConfig(max_steps=2, max_step_tokens=8, answer_prompt="Answer :"))
    chain = r.run_chains(["x ?"])[0]
    assert not chain[-1].is_answer  # the scripted model never answers on its own
    s = r.start("x ?")
    for _ in range(2):
        (_, s), = r.next_step([s])
    assert s.done
    (step, after), = r.next_step([r.with_answer_prompt(s)])
    assert step.is_answer and step.text == "Answer : a b" and step.content == "a b" and after.done
    assert step.meta["header_tokens"] == 0 and len(step.logprobs) == 3  # every generated token is content
    snap = r.snapshot(r.with_answer_prompt(s))
    assert snap["forced"] == "Answer :" and r.restore(snap).forced == "Answer :"
    assert "forced" not in r.snapshot(s)  # ordinary snapshots are as before (cached records compare equal)


def test_a_closing_line_cannot_start_with_a_stop_token(scripted):
    from agents.reasoners.stepgen import generate_steps

    s = _with_pending(scripted, "?")  # '?' -> newline: greedy decoding would end the line at once
    kw = dict(stop_ids=scripted.stop_ids, header_end_id=None, pad_id=scripted.pad_id, max_new_tokens=4)
    free, banned = generate_steps(scripted.model, [s.gen, s.gen], no_stop_first=[False, True], **kw)
    assert free.ids[0] in scripted.stop_ids and banned.ids[0] not in scripted.stop_ids
    assert banned.logprobs[0] < free.logprobs[0]  # the model's own logprob of the token it was made to pick
    closing = scripted.with_answer_prompt(HFState(s.question, s.front, s.transcript, 1, s.gen, done=True))
    (step, _), = scripted.next_step([closing])
    assert step.is_answer and step.content  # never "Answer:" with nothing after it


def test_dragin_qfs_pass_on_an_hf_model(tok, scripted_eager_model, scripted):
    """HFReasoner.qfs_pass: one eager pass over 'Question: …', the accepted steps and the step; headers and
    newlines are not scorable; the step's content tokens are the trigger candidates; qfs_terms turns it into
    content words of the question and text (the words of the lines, never a header)."""
    from agents.signals.attention import qfs_terms

    r = HFReasoner(scripted_eager_model, tok, HFReasonerConfig(max_step_tokens=8, attn_implementation="eager"))
    p = r.qfs_pass("Paris is the capital ?", ["Step 1: a b"], "Step 2: Paris capital")
    T = len(p["token_texts"])
    assert p["attn"].shape == (T, T) and len(p["entropies"]) == T
    words = [t.strip() for t, ok in zip(p["token_texts"], p["scorable"]) if ok]
    assert words == ["Paris", "is", "the", "capital", "?", "a", "b", "Paris", "capital"]
    assert [p["token_texts"][i].strip() for i in p["step_positions"]] == ["Paris", "capital"]
    terms = qfs_terms(**p)
    assert terms and set(terms) <= {"Paris", "capital", "a", "b"} and "Step" not in terms
    with pytest.raises(ValueError, match="eager attention"):
        scripted.qfs_pass("Paris ?", [], "Step 1: a")  # sdpa


def _dot_segmenter(path):
    """A tiny boundary segmenter trained on chains whose steps end with 'z' (the scripted model's full stop): it
    learns that a step starts after one (the real one is `kairos bench segmenter`'s; this one trains in seconds)."""
    from agents.boundary import SegmenterConfig, chain_example, train_segmenter

    rng = np.random.default_rng(0)
    words = ["a", "b", "c", "d", "e", "f", "g", "h", "x", "y", "Paris", "is", "the", "capital"]
    chains = [chain_example([f"Step {i + 1} : " + " ".join(rng.choice(words, rng.integers(2, 6))) + " z"
                             for i in range(rng.integers(2, 6))]) for _ in range(300)]
    seg = train_segmenter(chains, SegmenterConfig(n_buckets=64, d_model=16, n_layers=1, n_heads=2, ff_dim=32,
                                                  window=16, stride=8), epochs=20, seed=0)
    return seg.save(path)


def test_a_reasoner_that_writes_no_step_markers_is_cut_into_steps_by_the_segmenter(tok, free_form_model, tmp_path):
    """Free-form chains: the scripted model writes 'Paris is the capital z a b z a b z …' (no 'Step', no newline);
    with HFReasonerConfig.segmenter the step loop cuts it online where the segmenter predicts a step start — each
    step one sentence — and no token is lost or written twice (the state holds the prompt and the steps' tokens,
    and its KV cache continues the same text); without it the text is one step cut at max_step_tokens."""
    seg = _dot_segmenter(tmp_path / "seg")
    r = HFReasoner(free_form_model, tok, HFReasonerConfig(max_steps=6, max_step_tokens=12, segmenter=str(seg),
                                                          use_chat_template=False))
    s0 = r.start("x ?")
    chain, state = [], s0
    for _ in range(4):
        (step, state), = r.next_step([state])
        chain.append(step)
    assert [s.text for s in chain] == ["Paris is the capital z", "a b z", "a b z", "a b z"]
    assert all(s.finished and not s.is_answer for s in chain)
    assert state.gen.ids == s0.gen.ids + [t for s in chain for t in s.token_ids]  # nothing lost or repeated
    assert state.gen.n_cached == len(state.gen.ids) - 1
    # the cut cache continues exactly like a fresh encoding of the same ids
    from agents.reasoners.stepgen import GenState

    (cont, _), = r.next_step([state])
    fresh = type(state)(state.question, state.front, state.transcript, state.n_steps, GenState(list(state.gen.ids)))
    (cont_fresh, _), = r.next_step([fresh])
    assert cont.text == cont_fresh.text == "a b z" and np.allclose(cont.logprobs, cont_fresh.logprobs, atol=1e-5)
    # without the segmenter: one line that never ends, cut at max_step_tokens
    plain = HFReasoner(free_form_model, tok, HFReasonerConfig(max_steps=4, max_step_tokens=12,
                                                              use_chat_template=False))
    (one, _), = plain.next_step([plain.start("x ?")])
    assert not one.finished and one.text.startswith("Paris is the capital z a b z")
    with pytest.raises(ConfigError, match="no boundary segmenter"):
        HFReasonerConfig(segmenter=str(tmp_path / "missing")).validate()


def test_eigenscore_samples_on_an_hf_model_are_seeded_batch_invariant_and_paid(tok, random_model):
    """SeaKR's EigenScore on the hf backend: HFReasoner.generate_sampled gives each state k sampled steps with
    their hidden states, one RNG per sample, so a state's rows are the same alone or in a batch split over
    generation calls (max_batch); the samples differ from each other and by seed; what they generated is counted."""
    from agents.signals.hidden import eigenscore, sample_states, sample_states_batch

    r = HFReasoner(random_model, tok, HFReasonerConfig(max_step_tokens=6, max_batch=3))  # 3 rows a call
    states = [r.start(q) for q in QUESTIONS]
    (g0, _), = r.next_step(states[:1])
    batch = sample_states_batch(r, states, k=4, seed=3, greedy=[g0, None, None])
    for i, (s, b) in enumerate(zip(states, batch)):
        alone = sample_states(r, s, k=4, seed=3, greedy=g0 if i == 0 else None)
        np.testing.assert_allclose(b.Z, alone, rtol=1e-5, atol=1e-5)
        assert b.tokens >= 4 and b.seconds > 0.0
    assert batch[0].Z.shape == (5, 32) and np.array_equal(batch[0].Z[-1], g0.hidden_last[1])  # layer n_layers // 2
    Z = batch[1].Z
    assert len({tuple(np.round(row, 5)) for row in Z}) > 1  # the k samples differ
    assert not np.allclose(Z, sample_states(r, states[1], k=4, seed=4))
    assert np.isfinite(eigenscore(Z))
    with pytest.raises(ValueError, match="one each"):
        r.generate_sampled(states, [torch.Generator()])
