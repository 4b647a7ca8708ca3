"""IRCoT, FLARE and Single RAG as published (``eval.bench.published``; kind ``single``'s ``k``) on chains of the
shipped micro-world: what each one queries with, what it injects, its caps — and the renamed variants
(``IRCoT[step query, 1 passage, ≤4]``, ``FLARE[unmasked]``, ``SingleRAG[1 passage]``) still run today's episodes."""

from types import SimpleNamespace

import numpy as np
import pytest

from agents.query import clean_step, masked_query
from envs.core.config import ConfigError
from envs.env_config import EnvConfig
from envs.retrieval_env import RetrievalTimingEnv
from eval.bench.methods import MethodSpec, Skip
from eval.bench.runner import evaluated_setup

BASE = EnvConfig.from_dict({"split": "dev", "rsus_components": ["ent"], "signals": ["output"]})
QUESTIONS = [0, 1, 2, 3, 4, 5]


def _method(**kw) -> MethodSpec:
    return MethodSpec.from_dict({"name": kw.pop("name", "M"), **kw})


def _run(env_config: EnvConfig, trigger, mode: str | None, q: int, before=None) -> list[dict]:
    """One episode of ``trigger`` (retrieving with ``mode``): the reset info, then each decision's info;
    ``before(env)`` is called before every decision."""
    cfg, trigger = evaluated_setup(env_config, trigger, mode)
    env = RetrievalTimingEnv(cfg)
    obs, info = env.reset(options={"question_index": q})
    infos, done = [info], False
    while not done:
        if before is not None:
            before(env, info)
        obs, _, term, trunc, info = env.step(trigger.decide(obs, info))
        infos.append(info)
        done = term or trunc
    env.close()
    return infos


def _setup(m: MethodSpec):
    env_config, trigger, mode, _ = m.replay(BASE, {})
    return env_config, trigger, mode


# ------------------------------------------------------------------------------------------------------ IRCoT
def test_ircot_asks_the_question_first_then_each_new_sentence_and_collects_deduplicated_paragraphs():
    m = _method(name="IRCoT", kind="ircot", k=2)
    env_config, trigger, mode = _setup(m)
    assert (env_config.top_k, env_config.passages_per_retrieval, env_config.max_evidence_passages,
            env_config.max_retrievals_per_question, env_config.injection) == (2, 2, 15, 8, "front")
    grew = False
    for q in QUESTIONS[:4]:
        infos = _run(env_config, trigger, mode, q)
        decisions = infos[1:]
        assert all(d["retrievals"] == i + 1 for i, d in enumerate(decisions))  # every step retrieves
        # the question is the first query (step 1's closed-book draft is discarded: retrieved before step 1) ...
        assert decisions[0]["query"] == infos[0]["question"]
        # ... then each query is the sentence the chain wrote last (the step that stood after the last retrieval)
        for prev, d in zip(decisions, decisions[1:]):
            assert d["query"] == clean_step(prev["regenerated_step"])
        collected: list[str] = []
        log = decisions[-1]["episode"]
        for entry in log:  # the top-K of each search, those not collected yet, in rank order
            fresh = [p for p in entry["ranked_ids"][:2] if p not in collected]
            assert entry["passage_ids"] == fresh
            collected += entry["passage_ids"]
        assert len(collected) == len(set(collected))
        grew = grew or len(collected) > 2
    assert grew  # paragraphs accumulate over the calls


def test_ircot_sees_every_paragraph_collected_so_far_before_the_question():
    env_config, trigger, mode = _setup(_method(kind="ircot", k=2))
    seen = []

    def before(env, info):  # the state the current step was drafted from holds every paragraph collected so far
        seen.append((len(env.ep.used), len(env.ep.state("before", env.c.reasoner).front)))

    _run(env_config, trigger, mode, 1, before)
    assert [n for n, _ in seen] == [f for _, f in seen] and seen[-1][0] > 2


def test_ircot_caps_paragraphs_and_calls_and_the_report_says_whether_they_bound():
    m = _method(name="IRCoT", kind="ircot", k=2, max_paragraphs=3, max_calls=3)
    env_config, trigger, mode = _setup(m)
    infos = _run(env_config, trigger, mode, 1)  # a 3-hop question: 5 decisions (4 steps, the answer)
    decisions = infos[1:]
    ids = [p for d in decisions for p in d["passage_ids"]]
    assert len(ids) == 3 and len(set(ids)) == 3  # the paragraph cap: 2 + 1, then nothing more
    assert [d["retrievals"] for d in decisions] == [1, 2, 3, 3, 3]  # the call cap ...
    assert [d["capped"] for d in decisions] == [False, False, False, True, True]  # ... refused the last two
    episode = {"decisions": decisions[-1]["episode"], "truncated": False}
    x = m.report_extras({"episodes": [episode]})
    assert x["call_cap_bound_share"] == 1.0 and x["paragraph_cap_reached_share"] == 1.0
    assert x["paragraphs_per_question"] == 3.0 and x["max_steps_truncated_share"] == 0.0
    assert "the call cap refused a retrieval on 100% of the test questions" in m.report_notes({"episodes": [episode]})[0]


def test_ircot_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match=r"kind 'ircot' needs 'k', IRCoT's K"):
        _method(kind="ircot")
    with pytest.raises(ConfigError, match="takes no query_mode"):
        _method(kind="ircot", k=2, query_mode="step")
    with pytest.raises(ConfigError, match="passages_per_retrieval \\(4\\) injects more passages than a search "
                                          "returns \\(top_k 3\\): set top_k >= passages_per_retrieval"):
        EnvConfig.from_dict({"passages_per_retrieval": 4})


# ------------------------------------------------------------------------------------------------------ FLARE
def test_masked_query_drops_exactly_the_tokens_below_beta():
    probs = [(" Mira", 0.9), (" 's", 0.4), (" mother", 0.39999), (" is", 0.95), (" Tovan", 0.1), (" .", 0.41)]
    assert masked_query(probs, 0.4) == "Mira 's is ."  # 0.4 is not below 0.4: kept
    assert masked_query(probs, 0.0) == "Mira 's mother is Tovan ."
    assert masked_query(probs, 1.0) == ""
    from agents.query import masked_query_mode

    assert masked_query_mode("1")("Step 1 : x", "Who ?", {"token_probs": probs}) == "Who ?"  # all masked: the input
    with pytest.raises(ValueError, match="reads the step's token probabilities, and this step has none"):
        masked_query_mode("0.4")("Step 1 : x", "Who ?", {})
    with pytest.raises(ConfigError, match=r"query_modes: query mode 'masked:2': β must be in \[0, 1\]"):
        EnvConfig.from_dict({"query_modes": ["step", "masked:2"]})


def test_flare_fires_on_theta_and_queries_with_the_masked_step():
    m = _method(name="FLARE", kind="flare", beta=0.9)
    assert m.mode == "masked:0.9" and m.modes(None) == ["masked:0.9"]
    env_config = BASE.with_overrides(m.run_env(BASE))
    theta = 0.98
    trigger = m.make_trigger(threshold=theta)
    fired = dropped = 0
    for q in QUESTIONS:
        expected: list = []
        infos = _run(env_config, trigger, m.mode, q, lambda env, info, seen=expected: seen.append(
            (info["signals"].get("minprob"), env.ep.record.tokens)))
        for (minprob, tokens), prev, d in zip(expected, infos, infos[1:]):
            retrieved = d["retrievals"] > prev["retrievals"]
            assert retrieved == (minprob is not None and minprob < theta)  # fires when a token is below θ
            if tokens:  # minprob: the least probable token of the step (its end token included)
                assert minprob <= min(p for _, p in tokens) + 1e-6
            if retrieved:
                fired += 1
                assert d["query"] == masked_query(tokens, 0.9)  # the step without its tokens below β
                dropped += sum(p < 0.9 for _, p in tokens)
    assert fired and dropped  # the shipped world's chains have uncertain tokens: the mask does something


def test_flare_is_skipped_for_a_reasoner_without_token_logprobs():
    m = _method(name="FLARE", kind="flare")
    no_lp = SimpleNamespace(capabilities=SimpleNamespace(logprobs=False))
    runner = SimpleNamespace(env_config=SimpleNamespace(reasoner="openai", with_overrides=lambda env: BASE,
                                                        query_modes=BASE.query_modes),
                             _with_overrides=lambda env: (BASE, SimpleNamespace(reasoner=no_lp)))
    with pytest.raises(Skip, match="reasoner 'openai' returns no token log-probabilities: FLARE's trigger and "
                                   "masked query need them"):
        m.run(SimpleNamespace(runner=runner))
    with pytest.raises(ConfigError, match="unknown config key 'signal' for a 'flare' method \\(a key of kind "
                                          "threshold; valid keys: beta, curve, env, kind, name, query_mode, thresholds"):
        _method(kind="flare", signal="entropy")  # FLARE's signal is minprob
    with pytest.raises(ConfigError, match="kind 'flare' queries with the masked step \\(query mode masked:0.4\\); it "
                                          "takes no query_mode"):
        _method(kind="flare", query_mode="step")


def test_a_step_without_token_pieces_is_refused_not_queried_otherwise():
    from agents.reasoners.base import Step, token_probs

    with pytest.raises(ValueError, match="carries no per-token token pieces"):
        token_probs(Step(1, "Step 1 : a", "a", False, logprobs=np.log([0.5, 0.9])), "reasoner 'x'")
    with pytest.raises(ValueError, match="carries no per-token log-probabilities"):
        token_probs(Step(1, "Step 1 : a", "a", False, pieces=[" a"]), "reasoner 'x'")


def test_micro_world_steps_carry_their_token_pieces():
    env = RetrievalTimingEnv(BASE)
    rec = env.c.reasoner.next_step([env.c.reasoner.start(env.c.question_text(env.c.questions[0]))])[0][0]
    assert "".join(rec.pieces).split() == rec.content.split()
    assert len(rec.pieces) == len(rec.logprobs) - (1 if rec.finished else 0)  # the end token has no piece
    env.close()


# ------------------------------------------------------------------------------------------------- Single RAG
def test_single_rag_retrieves_once_with_the_question_and_injects_the_top_k():
    m = _method(name="SingleRAG", kind="single", k=3, injection="front")
    env_config, trigger, mode = _setup(m)
    assert (env_config.top_k, env_config.passages_per_retrieval, env_config.injection, mode) == (3, 3, "front",
                                                                                                 "question")
    for q in QUESTIONS[:3]:
        infos = _run(env_config, trigger, mode, q)
        first, rest = infos[1], infos[2:]
        assert first["retrievals"] == 1 and first["query"] == infos[0]["question"]  # before step 1
        assert len(first["passage_ids"]) == 3 and rest and all(d["retrievals"] == 1 for d in rest)
        log = infos[-1]["episode"]
        assert log[0]["passage_ids"] == log[0]["ranked_ids"][:3]  # the top-k of the question's search
    with pytest.raises(ConfigError, match="kind 'single' needs 'k', the passages injected"):
        _method(kind="single")


# ------------------------------------------------------------------------------------------- renamed variants
#: today's rows, recorded with the code before the published rows existed (kind single, always and threshold
#: minprob θ = 0.98 on dev questions 0–5 of the shipped world): actions, queries, injected passages, answer
TODAY = {
    "SingleRAG[1 passage]": [
        ["1000", ["Where was Faindal 's spouse 's spouse born ?"], ["F0080"], "Answer : Brairton"],
        ["10000", ["Where was Roumstor 's spouse 's mother 's spouse born ?"], ["F0204"], "Answer : Kasford"],
        ["10000", ["Who is Pindrein 's mother 's father 's mother 's spouse ?"], ["F0188"], "Answer : Faidur"],
        ["10000", ["Which company does Teimshox 's mother 's spouse 's father work for ?"], ["F0257"],
         "Answer : Sadyne"],
        ["10000", ["Where was Runtrail 's father 's mother 's mother born ?"], ["F0208"], "Answer : Braithford"],
        ["10000", ["Who is Lolbreith 's father 's mother 's spouse 's spouse ?"], ["F0163"], "Answer : Folnix"],
    ],
    "IRCoT[step query, 1 passage, ≤4]": [
        ["11110", ["Faindal 's spouse is Pindrein .", "Pindrein 's spouse is Faindal .",
                   "Faindal was born in Brairton .", "Brairton"], ["F0080", "F0189", "F0076", "F0050"],
         "Answer : Brairton"],
        ["11110", ["Roumstor 's spouse is Runtrail .", "Runtrail 's mother is Broumfain .",
                   "Broumfain 's spouse is Dorgox .", "Broumfain was born in Kasford ."],
         ["F0209", "F0208", "F0044", "F0005"], "Answer : Kasford"],
        ["11110", ["Pindrein 's mother is Nathbeth .", "Nathbeth 's father is Vaxsom .", "Vaxsom 's mother is Fumzi .",
                   "Fumzi 's spouse is Faidur ."], ["F0188", "F0182", "F0294", "F0070"], "Answer : Fumzi"],
        ["11110", ["Teimshox 's mother is Veinbom .", "Veinbom 's spouse is Brutran .",
                   "Veinbom 's father is Steithkroum .", "Steithkroum works for Fimdyne ."],
         ["F0259", "F0014", "F0298", "F0242"], "Answer : Zixco"],
        ["11110", ["Runtrail 's father is Veipouth .", "Veipouth 's mother is Vairgour .",
                   "Vairgour 's mother is Buxgur .", "Buxgur was born in Saimford ."],
         ["F0207", "F0304", "F0289", "F0015"], "Answer : Kasford"],
        ["11110", ["Lolbreith 's father is Folnix .", "Folnix 's mother is Krousheth .",
                   "Krousheth 's spouse is Shumstis .", "Shumstis 's spouse is Krousheth ."],
         ["F0161", "F0090", "F0147", "F0225"], "Answer : Krousheth"],
    ],
    "FLARE[unmasked]": [
        ["0000", [], [], "Answer : Brairton"],
        ["00000", [], [], "Answer : Kasford"],
        ["00000", [], [], "Answer : Faidur"],
        ["00010", ["Fumzi works for Fousware ."], ["F0094"], "Answer : Fousware"],
        ["10010", ["Runtrail 's father is Veipouth .", "Buxgur was born in Saimford ."], ["F0207", "F0015"],
         "Answer : Kasford"],
        ["10000", ["Lolbreith 's father is Folnix ."], ["F0161"], "Answer : Krousheth"],
    ],
}


@pytest.mark.parametrize("name", sorted(TODAY))
def test_the_renamed_variants_run_todays_episodes(name):
    m = {"SingleRAG[1 passage]": _method(name=name, kind="single", k=1),
         "IRCoT[step query, 1 passage, ≤4]": _method(name=name, kind="always"),
         "FLARE[unmasked]": _method(name=name, kind="threshold", signal="minprob")}[name]
    env_config, trigger, mode, _ = m.replay(BASE, {"chosen": 0.98})
    if name == "SingleRAG[1 passage]":  # the env as before: the question mode added, nothing else
        assert m.run_env(BASE).to_dict() == {"query_modes": [*BASE.query_modes, "question"]}
    got = []
    for q in QUESTIONS:
        infos = _run(env_config, trigger, mode, q)
        log = infos[-1]["episode"]
        got.append(["".join(str(e["action"][0]) for e in log), [e["query"] for e in log if e["action"][0]],
                    [p for e in log for p in e["passage_ids"]], infos[-1]["answer"]])
    assert got == TODAY[name]


def test_default_selection_is_the_first_unused_of_the_top_k_as_before():
    from agents.retrievers.base import SelectionConfig, select_passages
    from envs.hooks import FirstUnused

    rng = np.random.default_rng(0)
    for _ in range(50):
        hits = [SimpleNamespace(id=f"p{i}") for i in rng.permutation(8)[:5]]
        used = [f"p{i}" for i in rng.integers(0, 8, 3)]
        ep = SimpleNamespace(used=used)
        assert FirstUnused().choose(BASE, ep, hits) == select_passages(hits, used, SelectionConfig(top_k=3))
