"""The shared real files load with the documented counts (skipped when the files are absent)."""

from __future__ import annotations

from collections import Counter

from envs.core.data import load_dataset, medmcqa_knowledge_corpus, paragraph_corpus, pubmedqa_corpus


def test_hotpotqa_ircot_dev_500(real_file):
    qs = load_dataset("hotpotqa", real_file("hotpotqa/dev_500.jsonl"))
    assert len(qs) == 500 and qs.skipped == 0 and qs.fmt == "ircot-jsonl"
    n_par = Counter(len(q.metadata["paragraphs"]) for q in qs)
    assert n_par[10] == 489
    assert all(len(q.gold_passage_ids) == 2 for q in qs)
    first = qs[0]
    assert first.id == "5a8c7595554299585d9e36b6"
    assert first.answers == ["Chief of Protocol"]
    assert first.choices is None
    corpus = paragraph_corpus(qs, source="hotpotqa")
    assert sum(k * v for k, v in n_par.items()) == 4931
    assert len(corpus) == 4858  # union of the paragraphs, deduplicated by title + text
    assert all(pid in corpus for q in qs for pid in q.gold_passage_ids)


def test_medmcqa_dev(real_file):
    qs = load_dataset("medmcqa", real_file("medmcqa/dev.jsonl"))
    assert len(qs) == 4183
    assert all(len(q.choices) == 4 and q.answer_index is not None for q in qs)
    assert qs[0].answers[0] == "A" and qs[0].metadata["subject_name"] == "Physiology"
    assert sum(1 for q in qs if q.metadata.get("exp")) == 2206
    # knowledge from the first half, evaluated on the second half: no explanation of an evaluated question
    evaluated = qs[2000:]
    corpus = medmcqa_knowledge_corpus(qs[:2000], exclude_ids=[q.id for q in evaluated])
    evaluated_ids = {f"medmcqa-{q.id}" for q in evaluated}
    assert len(corpus) > 500 and not evaluated_ids & set(corpus.ids)
    assert not any(p.text.lower().startswith(("ans", "answer")) for p in corpus)


def test_pubmedqa_test_set(real_file):
    qs = load_dataset("pubmedqa", real_file("pubmedqa/test_set.json"))
    assert len(qs) == 500
    assert sum(len(q.metadata["paragraphs"]) for q in qs) == 1689
    assert all(q.choices == ["yes", "no", "maybe"] and q.answers[0] in q.choices for q in qs)
    assert qs[0].id == "12377809" and qs[0].answers == ["yes"]
    corpus = pubmedqa_corpus(qs)
    assert len(corpus) == 1689
    assert corpus[0].id == "12377809-0"
    assert all(q.metadata["LONG_ANSWER"] not in {p.text for p in corpus} for q in qs[:50])
