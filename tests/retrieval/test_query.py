"""Query formulation: the named modes, the registry, entity / relation heuristics, the tagger fallback."""

from __future__ import annotations

import pytest

from agents import query as q
from agents.query import (
    DEFAULT_MODES,
    QUERY_MODES,
    QueryGenerator,
    clean_step,
    content_words,
    entity_relation,
    extract_entities,
    get_query_mode,
    register_query_mode,
)

MICRO_STEP = "Step 2 : Mira 's mother is Tovan ."
MICRO_Q = "Who is Lek 's father 's mother ?"


def test_default_modes_are_registered_in_order():
    assert list(DEFAULT_MODES) == ["step", "content_words", "question_step", "info_need"]
    assert all(m in QUERY_MODES for m in [*DEFAULT_MODES, "question"])
    assert QueryGenerator().modes == list(DEFAULT_MODES) and len(QueryGenerator()) == 4


def test_microworld_step_in_every_mode():
    gen = QueryGenerator([*DEFAULT_MODES, "question"])
    got = gen.all(MICRO_STEP, MICRO_Q)
    assert got == {
        "step": "Mira 's mother is Tovan .",
        "content_words": "Mira mother Tovan",
        "question_step": "Who is Lek 's father 's mother ? Mira 's mother is Tovan .",
        "info_need": "What is Mira 's mother ?",
        "question": MICRO_Q,
    }
    assert gen(MICRO_STEP, MICRO_Q, 3) == got["info_need"]  # by action index
    assert gen("Step 1 : Mira was born in Kasford .", None, "info_need") == "What is Mira 's birthplace ?"
    assert gen("Step 1 : Dorn works for Zaptek .", None, "info_need") == "What is Dorn 's employer ?"


def test_state_forms():
    class State:
        question = MICRO_Q
        context = {"relation": "father"}

    class Step:
        text = MICRO_STEP

    gen = QueryGenerator()
    assert gen(Step(), State(), "info_need") == "What is Mira 's father ?"  # context overrides the relation
    assert gen(MICRO_STEP, {"question": "Q?"}, "question_step").startswith("Q? Mira")
    assert gen(MICRO_STEP, "Q?", "question_step").startswith("Q? Mira")


def test_empty_query_falls_back_to_the_step():
    gen = QueryGenerator()
    assert gen("Step 3: It is so.", None, "info_need") == "It is so."
    assert gen("Step 3: It is.", None, "content_words") == "It is."


def test_registry_and_dotted_path():
    @register_query_mode("_test_upper")
    def upper(step_text, question, context):
        return step_text.upper()

    try:
        assert QueryGenerator(["_test_upper"])("abc", None, "_test_upper") == "ABC"
        assert get_query_mode("agents.query:step_query") is q.step_query
        assert QueryGenerator(["agents.query:question_query"])("s", "Q?", 0) == "Q?"
        with pytest.raises(ValueError, match="unknown query mode 'nope'.*registered: step"):
            get_query_mode("nope")
    finally:
        QUERY_MODES.unregister("_test_upper")


def test_clean_step():
    assert clean_step("Step 12:  a   b ") == "a b"
    assert clean_step("step 1 . x") == "x"
    assert clean_step("Answer: Paris") == "Paris"
    assert clean_step("Stepwise reasoning") == "Stepwise reasoning"


@pytest.mark.parametrize("tagger", ["pattern", "stoplist"])
def test_real_text_heuristics(tagger, monkeypatch):
    if tagger == "stoplist":
        monkeypatch.setattr(q, "_pattern_tagger", lambda: None)
    elif q.tagger_name() != "pattern":
        pytest.skip("textblob not installed")
    assert entity_relation("The director of Sinister is Scott Derrickson.") == ("Sinister", "director")
    assert entity_relation("Corliss Archer's portrayer was Shirley Temple.") == ("Corliss Archer", "portrayer")
    ent, rel = entity_relation("Scott Derrickson was born in 1966 in Denver.")
    assert ent == "Scott Derrickson" and rel == "birthplace"
    assert extract_entities("Shirley Temple met Walt Disney in Los Angeles.")[:2] == ["Shirley Temple", "Walt Disney"]


def test_content_words_pos_filter():
    words = content_words("Scott Derrickson was quickly born in 1966 and did not direct the big film.")
    low = [w.lower() for w in words]
    for w in ("scott", "derrickson", "born", "1966", "direct", "big", "film", "quickly"):
        assert w in low
    for w in ("was", "in", "and", "did", "not", "the"):
        assert w not in low


def test_stoplist_fallback_without_tagger(monkeypatch):
    monkeypatch.setattr(q, "_pattern_tagger", lambda: None)
    assert q.tagger_name() == "stoplist"
    assert content_words("Mira 's mother is Tovan .") == ["Mira", "mother", "Tovan"]
    assert extract_entities("Shirley Temple met Walt Disney.") == ["Shirley Temple", "Walt Disney"]
    assert QueryGenerator()(MICRO_STEP, MICRO_Q, "info_need") == "What is Mira 's mother ?"
