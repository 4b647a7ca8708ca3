"""The vllm reasoner (agents.reasoners.vllm) on SmolLM2-135M-Instruct in float32, against the hf backend on the same
prompts: identical step texts and token ids, signals and hidden-state features within float32 tolerance, the
BranchingReasoner protocol (snapshot / restore, branches through vLLM's prefix cache, evidence, answer closing,
sampling), concurrent callers batched by vLLM's scheduler, masking where a feature is off, and clear errors.

Tolerances: both engines compute in float32 but sum in different orders (vLLM's CPU kernels vs torch's), so values
agree to float32 rounding accumulated over 30 layers — measured ≤ 2e-5 absolute on log-probabilities and entropies,
≤ 1e-6 relative on pooled hidden states; the tests allow 1e-4 / 1e-5 (an order of magnitude of margin, still far
below any signal's threshold resolution).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _needs import needs_hotpotqa, needs_smollm2, needs_vllm

pytestmark = [
    pytest.mark.slow,
    needs_vllm,
    needs_smollm2,
]

QUESTIONS = ["Which city is the capital of France?", "Who wrote the novel Nineteen Eighty-Four?",
             "What is the chemical symbol for gold?", "Which magazine was started first, Arthur's Magazine or "
             "First for Women?"]
EVIDENCE = "Arthur's Magazine (1844-1846) was an American literary periodical published in Philadelphia."
OPTS = {"max_steps": 3, "max_step_tokens": 24}


@pytest.fixture(scope="module")
def vllm_r():
    from agents.reasoners.registry import make_reasoner

    r = make_reasoner("vllm", kv_cache_gib=1, **OPTS)
    yield r
    r.close()


@pytest.fixture(scope="module")
def hf_r():
    from agents.reasoners.registry import make_reasoner

    return make_reasoner("hf", **OPTS)


def _close(a, b, atol, what, rtol=0.0):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=what)


def _rel(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-12))


def test_greedy_chains_and_signals_equal_the_hf_backend(vllm_r, hf_r):
    from agents.signals.hidden import pulse_features

    v, h = vllm_r.run_chains(QUESTIONS), hf_r.run_chains(QUESTIONS)
    n_steps = 0
    for cv, ch in zip(v, h):
        assert [s.text for s in cv] == [s.text for s in ch]
        for sv, sh in zip(cv, ch):
            n_steps += 1
            assert sv.token_ids == sh.token_ids and sv.meta["header_tokens"] == sh.meta["header_tokens"]
            assert sv.finished == sh.finished and sv.is_answer == sh.is_answer
            assert sv.pieces == sh.pieces and len(sv.pieces) <= len(sv.logprobs)  # FLARE's masked query reads them
            _close(sv.logprobs, sh.logprobs, 1e-4, "logprobs")
            _close(sv.entropies, sh.entropies, 1e-4, "entropies")
            _close(sv.maxprobs, sh.maxprobs, 1e-4, "maxprobs")
            assert _rel(sv.hidden_first, sh.hidden_first) < 1e-5
            if sh.hidden_mean is None:
                assert sv.hidden_mean is None
                continue
            assert sv.hidden_mean.shape == sh.hidden_mean.shape == (31, 576)
            assert _rel(sv.hidden_mean, sh.hidden_mean) < 1e-5 and _rel(sv.hidden_last, sh.hidden_last) < 1e-5
            _close(pulse_features(sv.hidden_mean, (7, 27)), pulse_features(sh.hidden_mean, (7, 27)), 1e-3, "pulse")
            assert sv.token_transitions.shape == sh.token_transitions.shape == (len(sh.logprobs), 2, 30)
            _close(sv.token_transitions, sh.token_transitions, 1e-3, "per-token transitions", rtol=1e-3)  # PUlSE max, token_mean
    assert n_steps >= 8


def test_snapshot_restore_and_branches_reuse_the_prefix_cache(vllm_r):
    s0 = vllm_r.start(QUESTIONS[3])
    (st1, s1), = vllm_r.next_step([s0])
    snap = vllm_r.snapshot(s1)
    assert snap["ids"] == list(s1.gen.ids) and vllm_r.snapshot(vllm_r.restore(snap)) == snap
    (a, _), = vllm_r.next_step([s1])
    cached = vllm_r.engine.stats["cached_tokens"]
    (b, _), = vllm_r.next_step([vllm_r.restore(snap)])  # the same state rebuilt from plain data: the same step
    assert a.text == b.text and a.token_ids == b.token_ids
    assert vllm_r.engine.stats["cached_tokens"] - cached >= 32  # the whole prefix (full blocks) came from the cache
    # a branch: the regenerated step with evidence shares the prompt before it
    cached = vllm_r.engine.stats["cached_tokens"]
    (reg, after), = vllm_r.regenerate([s1], [[EVIDENCE]], "step")
    assert vllm_r.engine.stats["cached_tokens"] - cached >= 32
    assert after.transcript[-2] == f"Evidence: {EVIDENCE}\n" and reg.index == 2


def test_evidence_injection_and_answer_closing_equal_the_hf_backend(vllm_r, hf_r):
    for mode in ("step", "front"):
        sv, sh = vllm_r.start(QUESTIONS[3]), hf_r.start(QUESTIONS[3])
        (_, sv), = vllm_r.next_step([sv])
        (_, sh), = hf_r.next_step([sh])
        ev_v, ev_h = vllm_r.with_evidence(sv, [EVIDENCE], mode), hf_r.with_evidence(sh, [EVIDENCE], mode)
        assert list(ev_v.gen.ids) == list(ev_h.gen.ids)  # the same prompt, token for token
        (rv, _), = vllm_r.next_step([ev_v])
        (rh, _), = hf_r.next_step([ev_h])
        assert rv.text == rh.text
    # answer closing: 'Answer:' written for the model; its first token may not end the line
    sv, sh = vllm_r.start(QUESTIONS[0]), hf_r.start(QUESTIONS[0])
    (_, sv), = vllm_r.next_step([sv])
    (_, sh), = hf_r.next_step([sh])
    (av, _), = vllm_r.next_step([vllm_r.with_answer_prompt(sv)])
    (ah, _), = hf_r.next_step([hf_r.with_answer_prompt(sh)])
    assert av.is_answer and av.content and av.text == ah.text
    assert av.token_ids[0] not in vllm_r.stop_ids
    _close(av.logprobs, ah.logprobs, 1e-4, "closing logprobs (the model's own, before the stop ban)")


def test_sampling_is_seeded_and_batch_invariant(vllm_r):
    s = vllm_r.start(QUESTIONS[1])
    a = vllm_r.sample_alternatives(s, 3, seed=7)
    assert a == vllm_r.sample_alternatives(s, 3, seed=7) and len(set(a)) > 1
    assert 3 <= a.tokens <= 3 * vllm_r.cfg.max_step_tokens  # the tokens they took (the env charges the step)
    assert vllm_r.sample_alternatives(s, 3, seed=8) != a
    # with other requests running beside it (another thread's greedy chains), the samples are the same
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("chains", vllm_r.run_chains(QUESTIONS[:2])))
    t.start()
    b = vllm_r.sample_alternatives(s, 3, seed=7)
    t.join()
    assert b == a and len(out["chains"]) == 2


def test_concurrent_callers_share_one_running_batch(vllm_r):
    eng = vllm_r.engine
    eng.stats["running_max"] = 0
    results = {}

    def call(i):
        results[i] = vllm_r.run_chains([QUESTIONS[i]], 2)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert eng.stats["running_max"] >= 2  # one caller sends one state at a time: >1 means vLLM batched callers


@pytest.fixture(scope="module")
def vllm_nocapture():
    from agents.reasoners.registry import make_reasoner

    r = make_reasoner("vllm", kv_cache_gib=1, capture_hidden=False, **OPTS)
    yield r
    r.close()


def test_capture_off_keeps_output_signals_and_masks_hidden_ones(vllm_nocapture, vllm_r):
    r = vllm_nocapture
    assert r.engine is vllm_r.engine  # one engine per process and options: shared, it captures every row
    assert not r.capabilities.hidden_states
    (step, _), = r.next_step([r.start(QUESTIONS[0])])
    assert step.hidden_mean is None and step.hidden_first is None
    assert step.entropies is not None and step.logprobs is not None  # from the captured final row
    (ref, _), = vllm_r.next_step([vllm_r.start(QUESTIONS[0])])
    assert step.text == ref.text
    _close(step.entropies, ref.entropies, 1e-6, "entropies")


def test_a_second_capturing_engine_in_one_process_is_refused(vllm_r):
    from agents.reasoners.registry import make_reasoner

    with pytest.raises(ValueError, match="already runs a capturing vLLM engine"):
        make_reasoner("vllm", kv_cache_gib=1, dtype="bfloat16", **OPTS)


@needs_hotpotqa
def test_an_env_on_the_vllm_backend_equals_the_hf_env():
    from envs.registration import make_env

    base = {"task": "hotpotqa", "split": "dev[0:3]",
            "max_steps": 2, "max_step_tokens": 16, "rsus_components": ["ent"],
            "signals": ["pulse", "output", "rsus", "content"]}
    envs = {name: make_env(config={**base, "reasoner": name, "reasoner_options": {"kv_cache_gib": 1}
                                   if name == "vllm" else {}}) for name in ("hf", "vllm")}
    for q in range(3):
        obs = {k: e.reset(options={"question_index": q}) for k, e in envs.items()}
        for action in (1, 0):
            (ov, iv), (oh, ih) = obs["vllm"], obs["hf"]
            assert iv["step_text"] == ih["step_text"]
            assert iv["masked_signals"] == ih["masked_signals"]
            for field in oh:  # content fields are stored in float16: one unit in the last place (2^-10) apart at most
                _close(ov[field], oh[field], 2e-3, field, rtol=2e-3)
            res = {k: e.step(action) for k, e in envs.items()}
            if any(r[2] or r[3] for r in res.values()):
                assert res["vllm"][2:4] == res["hf"][2:4]
                break
            obs = {k: (r[0], r[4]) for k, r in res.items()}
    for e in envs.values():
        e.close()


def test_the_confidence_side_turn_equals_the_hf_backend_and_leaves_the_chain(vllm_r, hf_r, tmp_path):
    """RSUS's U_verb by prompt on vLLM: one batched side turn after the batch's steps, through the prefix cache of the
    chain; the replies are the hf backend's, token for token, and the chain is the one without asking. Through the
    env too: the reply in info, its tokens in the step's."""
    from agents.reasoners.confidence import ConfidenceQuestion

    states_v, states_h = [vllm_r.start(q) for q in QUESTIONS], [hf_r.start(q) for q in QUESTIONS]
    plain = [s.text for s, _ in vllm_r.next_step(states_v)]
    try:
        vllm_r.confidence = hf_r.confidence = ConfidenceQuestion()
        cached = vllm_r.engine.stats["cached_tokens"]
        rv, rh = vllm_r.next_step(states_v), hf_r.next_step(states_h)
        assert vllm_r.engine.stats["cached_tokens"] - cached >= 2 * 32 * len(QUESTIONS)  # step and side turn: cached
    finally:
        vllm_r.confidence = hf_r.confidence = None
    assert [s.text for s, _ in rv] == plain == [s.text for s, _ in rh]
    for (sv, av), (sh, _) in zip(rv, rh):
        mv, mh = sv.meta["confidence_reply"], sh.meta["confidence_reply"]
        assert mv["reply"] == mh["reply"] and mv["tokens"] == mh["tokens"] >= 1
        assert sv.meta.get("verbal_confidence") == sh.meta.get("verbal_confidence")
        assert sv.n_tokens == len(sv.token_ids) + sv.meta["blank_tokens"] + mv["tokens"]
        assert av.gen.ids[-len(sv.token_ids):] == sv.token_ids  # the chain's state ends with the step, not the reply
    from test_openai_env import _dataset

    from envs.registration import make_env

    env = make_env(config={"task": "hotpotqa", "data_path": str(_dataset(tmp_path / "hq.jsonl")), "split": "dev",
                           "reasoner": "vllm", "reasoner_options": {"kv_cache_gib": 1}, "max_steps": 2,
                           "max_step_tokens": 16, "signals": ["output", "rsus"], "rsus_components": ["verb", "ent"]})
    _, info = env.reset(options={"question_index": 0})
    vc = info["verbal_confidence"]
    assert vc["tokens"] >= 1 and (("u_verb" in info["signals"]) == (vc["confidence"] is not None))
    env.close()
