"""Corpus, Passage and QAExample behaviour."""

from __future__ import annotations

import pytest

from envs.core.data import Corpus, CorpusError, Passage, QAExample, passage_id


def _corpus() -> Corpus:
    return Corpus.from_passages(
        [Passage("a", "Alpha", "first text"), Passage("b", "Beta", "second text")], source="unit"
    )


def test_corpus_sequence_and_lookup():
    c = _corpus()
    assert len(c) == 2
    assert [p.id for p in c] == ["a", "b"]
    assert c[1].title == "Beta" and c[-1].id == "b"
    assert c.get("a").text == "first text"
    assert c.get("missing") is None
    assert "a" in c and "zz" not in c
    assert c.ids == ["a", "b"]


def test_corpus_fingerprint_is_stable_and_content_sensitive():
    assert _corpus().fingerprint() == _corpus().fingerprint()
    assert len(_corpus().fingerprint()) == 64
    shifted = Corpus.from_passages([Passage("a", "Alph", "afirst text"), Passage("b", "Beta", "second text")])
    assert shifted.fingerprint() != _corpus().fingerprint()
    reordered = Corpus.from_passages(list(reversed(list(_corpus()))))
    assert reordered.fingerprint() != _corpus().fingerprint()


def test_corpus_duplicate_id_names_it():
    with pytest.raises(CorpusError, match=r"unit: duplicate passage id 'a' \(positions 0 and 2\)"):
        Corpus.from_passages([Passage("a", "", "x"), Passage("b", "", "y"), Passage("a", "", "z")],
                             source="unit")


def test_corpus_empty_names_source():
    with pytest.raises(CorpusError, match="my-source: empty corpus"):
        Corpus.from_passages([], source="my-source")


def test_passage_id_depends_on_title_and_text():
    assert passage_id("T", "x") == passage_id("T", "x")
    assert passage_id("T", "x") != passage_id("T ", "x") != passage_id("Tx", "")


def test_answer_index_from_letter_or_text():
    assert QAExample("q", "?", ["C"], choices=["Paris", "London", "Rome"]).answer_index == 2
    # a lowercase letter is an answer text, not an option letter ("a" could be an option's text)
    assert QAExample("q", "?", ["c"], choices=["Paris", "London", "Rome"]).answer_index is None
    assert QAExample("q", "?", ["a"], choices=["b", "a"]).answer_index == 1
    ex = QAExample("q", "?", ["London"], choices=["Paris", "London", "Rome"])
    assert ex.answer_index == 1 and ex.answer_letter == "B"
    ex = QAExample("q", "?", ["D"], choices=["Paris", "London", "Rome"])
    assert ex.answer_index is None
    assert QAExample("q", "?", ["x"]).answer_index is None
