"""The retriever contract: scored passages, the protocol, the PUlSE injection rule."""

from __future__ import annotations

import pytest

from agents.retrievers import PassageSelector, RetrievedPassage, Retriever, SelectionConfig, select_passages
from envs.core.config import ConfigError
from envs.core.data.types import Passage


def ranked(*ids: str) -> list[RetrievedPassage]:
    return [RetrievedPassage(i, i.upper(), f"text {i}", float(10 - n)) for n, i in enumerate(ids)]


def test_retrieved_passage_is_a_passage_with_a_score():
    p = RetrievedPassage.of(Passage("a", "T", "x"), 2)
    assert isinstance(p, Passage) and p.score == 2.0 and (p.id, p.title, p.text) == ("a", "T", "x")


def test_pulse_rule_injects_first_unused_of_top3():
    sel = PassageSelector()
    r = ranked("a", "b", "c", "d")
    assert [p.id for p in sel.select(r)] == ["a"]
    assert [p.id for p in sel.select(r)] == ["b"]
    assert [p.id for p in sel.select(r)] == ["c"]
    assert sel.select(r) == []  # "d" is outside the top 3
    assert sel.used == ["a", "b", "c"]
    sel.new_question()
    assert [p.id for p in sel.select(r)] == ["a"]


def test_selection_is_configurable():
    r = ranked("a", "b", "c")
    assert [p.id for p in select_passages(r, {"a", "b", "c"}, SelectionConfig(when_all_used="top"))] == ["a"]
    assert [p.id for p in select_passages(r, {"a"}, SelectionConfig(n_inject=2))] == ["b", "c"]
    assert [p.id for p in select_passages(r, {"a"}, SelectionConfig(skip_used=False))] == ["a"]
    assert [p.id for p in select_passages(r, set(), SelectionConfig(top_k=1, n_inject=3))] == ["a"]
    assert select_passages([], {"a"}) == []
    with pytest.raises(ConfigError):
        SelectionConfig.from_dict({"top_k": 0})
    with pytest.raises(ConfigError):
        SelectionConfig.from_dict({"when_all_used": "random"})


def test_retrievers_satisfy_the_protocol(capitals, bm25_cfg):
    from agents.retrievers import BM25Retriever, CachedRetriever

    bm = BM25Retriever.build(capitals, bm25_cfg)
    assert isinstance(bm, Retriever)
    assert isinstance(CachedRetriever(bm), Retriever)
