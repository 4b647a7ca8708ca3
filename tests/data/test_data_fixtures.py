"""Loaders on small fixture files written from the published schemas; FlashRAG round trip."""

from __future__ import annotations

import json

import pytest

from envs.core.data import (
    Corpus,
    Passage,
    load_dataset,
    load_flashrag_corpus,
    paragraph_corpus,
    passage_id,
    write_flashrag,
)


def test_musique(fixtures_dir):
    qs = load_dataset("musique", fixtures_dir / "musique_dev.jsonl")
    assert [q.id for q in qs] == ["2hop__1001_2002", "3hop1__3003_4004_5005"]
    assert qs[0].answers == ["Charlottetown", "Charlottetown, PEI", "City of Charlottetown"]
    assert [q.metadata["hops"] for q in qs] == [2, 3]
    assert qs[0].metadata["answerable"] is True
    assert len(qs[0].gold_passage_ids) == 2 and len(qs[1].gold_passage_ids) == 3
    # the Green Gables paragraph is in both questions: one passage in the corpus, same id in both
    corpus = paragraph_corpus(qs)
    assert len(corpus) == 4 + 3 - 1
    green = passage_id("Green Gables", qs[0].metadata["paragraphs"][1]["text"])
    assert green in qs[1].gold_passage_ids and green not in qs[0].gold_passage_ids and green in corpus
    # newlines inside paragraph text are normalised to spaces
    assert "\n" not in corpus.get(qs[1].gold_passage_ids[1]).text


def test_2wikimultihopqa(fixtures_dir):
    qs = load_dataset("2wikimultihopqa", fixtures_dir / "2wikimultihopqa_dev.json")
    assert qs.fmt == "original-json" and len(qs) == 2
    q = qs[0]
    assert q.answers == ["Ingrid Berg"]
    assert q.metadata["type"] == "compositional"
    assert q.metadata["evidences"][1] == ["Anna Berg", "mother", "Ingrid Berg"]
    titles = {p["id"]: p["title"] for p in q.metadata["paragraphs"]}
    assert sorted(titles[g] for g in q.gold_passage_ids) == ["Anna Berg", "The Quiet Harbour"]
    assert q.metadata["paragraphs"][0]["text"].endswith("Anna Berg. It was shot in Bergen.")
    assert len(paragraph_corpus(qs)) == 4  # "The Quiet Harbour" appears in both questions


def test_hotpotqa_original_json_matches_ircot_ids(fixtures_dir):
    original = load_dataset("hotpotqa", fixtures_dir / "hotpotqa_dev_distractor.json")
    ircot = load_dataset("hotpotqa", fixtures_dir / "hotpotqa_ircot.jsonl")
    assert original.fmt == "original-json" and ircot.fmt == "ircot-jsonl"
    q = original[0]
    assert q.answers == ["Lake Kestrel"]
    assert (q.metadata["type"], q.metadata["level"]) == ("bridge", "medium")
    assert original[1].answers == ["yes"] and original[1].metadata["level"] == "hard"
    assert len(q.gold_passage_ids) == 2
    # same question in both formats: same paragraphs, same passage ids, same gold
    assert q.gold_passage_ids == ircot[0].gold_passage_ids
    texts = [p["text"] for p in q.metadata["paragraphs"]]
    assert texts == [p["text"] for p in ircot[0].metadata["paragraphs"]]
    assert texts[0] == "Sable Point Lighthouse is a lighthouse on Lake Kestrel. It was built in 1874."


def test_medqa(fixtures_dir):
    qs = load_dataset("medqa", fixtures_dir / "medqa_dev.jsonl")
    assert [q.id for q in qs] == ["medqa-medqa_dev-0", "medqa-medqa_dev-1"]
    assert len(qs[0].choices) == 5 and qs[0].answers == ["A", "Serum ferritin"]
    assert len(qs[1].choices) == 4 and qs[1].answer_index == 1
    assert qs[0].metadata["meta_info"] == "step1"


def test_mmlu_pro(fixtures_dir):
    qs = load_dataset("mmlu-pro", fixtures_dir / "mmlu_pro_test.jsonl")  # "-" works as "_"
    assert [q.id for q in qs] == ["70", "71"]
    assert len(qs[0].choices) == 10 and qs[0].answers == ["B", "3x^2"]
    assert qs[1].answer_letter == "C" and qs[1].metadata["category"] == "biology"


def test_limit(fixtures_dir):
    qs = load_dataset("musique", fixtures_dir / "musique_dev.jsonl", limit=1)
    assert len(qs) == 1
    with pytest.raises(ValueError, match="limit"):
        load_dataset("musique", fixtures_dir / "musique_dev.jsonl", limit=0)


def test_flashrag_round_trip(fixtures_dir, tmp_path):
    qs = load_dataset("musique", fixtures_dir / "musique_dev.jsonl") + load_dataset(
        "mmlu_pro", fixtures_dir / "mmlu_pro_test.jsonl"
    )
    corpus = paragraph_corpus(qs[:2])
    paths = write_flashrag(qs, corpus, tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == ["corpus.jsonl", "questions.jsonl"]
    assert not list((tmp_path / "out").glob(".*.tmp"))  # atomic writes leave no temp files
    first = json.loads(paths["questions"].read_text().splitlines()[0])
    assert set(first) == {"id", "question", "golden_answers", "metadata"}
    mc = json.loads(paths["questions"].read_text().splitlines()[2])
    assert mc["choices"][1] == "3x^2" and mc["golden_answers"] == ["B", "3x^2"]
    line = json.loads(paths["corpus"].read_text().splitlines()[0])
    assert line["contents"] == f"{corpus[0].title}\n{corpus[0].text}"

    back = load_dataset("flashrag", paths["questions"])
    assert [(q.id, q.question, q.answers, q.choices, q.gold_passage_ids) for q in back] == [
        (q.id, q.question, q.answers, q.choices, q.gold_passage_ids) for q in qs
    ]
    assert back[0].metadata["hops"] == 2
    back_corpus = load_flashrag_corpus(paths["corpus"])
    assert list(back_corpus) == list(corpus) and back_corpus.fingerprint() == corpus.fingerprint()


def test_flashrag_corpus_text_fallback_and_quoted_titles(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        '{"id": "1", "contents": "\\"Aaron\\"\\nAaron is a prophet."}\n'
        '{"id": "2", "title": "Bob", "text": "Bob is a name."}\n'
        '{"id": "3", "text": "No title here."}\n'
    )
    c = load_flashrag_corpus(path)
    assert list(c) == [Passage("1", "Aaron", "Aaron is a prophet."), Passage("2", "Bob", "Bob is a name."),
                       Passage("3", "", "No title here.")]


def test_flashrag_integer_golden_answer_is_an_option_index(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": "m1", "question": "2+2?", "golden_answers": [1], "choices": ["3", "4", "5"]}\n')
    (q,) = load_dataset("flashrag", path)
    assert q.answers == ["B", "4"] and q.answer_index == 1


def test_write_flashrag_without_corpus(tmp_path, fixtures_dir):
    qs = load_dataset("medqa", fixtures_dir / "medqa_dev.jsonl")
    paths = write_flashrag(qs, None, tmp_path)
    assert list(paths) == ["questions"] and not (tmp_path / "corpus.jsonl").exists()
    assert isinstance(paragraph_corpus(load_dataset("musique", fixtures_dir / "musique_dev.jsonl")), Corpus)
