"""Corpus builders and the removal of answer-revealing phrases from MedMCQA explanations."""

from __future__ import annotations

import pytest

from envs.core.data import (
    CorpusError,
    QAExample,
    medmcqa_knowledge_corpus,
    paragraph_corpus,
    strip_answer_leaks,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # answer statements, in the shapes the MedMCQA explanations use
        ("Ans. is 'a' i.e., Vitamin A deficiency", "Vitamin A deficiency"),
        ("Ans: b", ""),
        ("Answer is option c. Because it binds tubulin.", "Because it binds tubulin."),
        ("Ans. B. Dinoprostone is PGE2.", "Dinoprostone is PGE2."),
        ("Ans-a. The oncotic pressure falls.", "The oncotic pressure falls."),
        ("Answer- A (Cricoid cartilage) is the landmark.", "(Cricoid cartilage) is the landmark."),
        ("Ans: C i.e. Hypnozoite", "Hypnozoite"),
        ("Answer (A) succinylcholine", "succinylcholine"),
        ("Ans is 'd' i.e., None of the above", "None of the above"),
        ("Ans. is 'a' & 'c' i.e., Gout and Pseudogout", "Gout and Pseudogout"),
        ("Ans: A, B and C are true", "are true"),
        ("Ans- D, i.e. Gout", "Gout"),
        ("The correct answer is (D).", ""),
        ("Ratio is above 1, so the answer will be B", "Ratio is above 1, so"),
        ("The answer is A Acute pyelonephritis", "Acute pyelonephritis"),
        ("Ans. Dinoprostone is used", "Dinoprostone is used"),
        # option references and letter marks
        ("Option A- Broad QRS complex", "Broad QRS complex"),
        ("Option 'C' erythema multiforme", "erythema multiforme"),
        ("Transthyretin (Option a) - transports thyroxine", "Transthyretin - transports thyroxine"),
        ("(i.e. option b. incorrect).", "(i.e. incorrect)."),
        ("Options A & B are wrong", "are wrong"),
        ("About option d\n\nTSH resistance", "About\n\nTSH resistance"),
        ("(a) Oculomotor nerve (b) Trochlear nerve", "Oculomotor nerve Trochlear nerve"),
        # ordinary words that look like letters stay
        ("A patient with a fever: the answer is a reduction in Vitamin A.",
         "A patient with a fever: the answer is a reduction in Vitamin A."),
        ("Drug of choice is B complex", "Drug of choice is B complex"),
        ("The answer is E. coli", "The answer is E. coli"),
        ("e.g. the answer is e.g. unclear", "e.g. the answer is e.g. unclear"),
        ("Hepatitis B virus and Type I diabetes", "Hepatitis B virus and Type I diabetes"),
        ("ANS is the autonomic nervous system", "ANS is the autonomic nervous system"),
        ("Answer: A patient should be intubated", "A patient should be intubated"),
    ],
)
def test_strip_answer_leaks(text, expected):
    assert strip_answer_leaks(text) == expected


def _mc(qid: str, exp: str | None, question: str = "Q?") -> QAExample:
    return QAExample(qid, question, ["A", "x"], ["x", "y", "z", "w"],
                     metadata={"exp": exp, "subject_name": "Pharmacology"})


def test_knowledge_corpus_is_disjoint_stripped_and_deduplicated():
    pool = [
        _mc("e1", "Ans. is 'a' i.e., Atropine. Atropine blocks muscarinic receptors."),
        _mc("k1", "Ans: B. Propranolol is a non-selective beta blocker."),
        _mc("k2", None),
        _mc("k3", "Ans: b"),  # nothing left after stripping
        _mc("k4", "Ans: C. Propranolol is a non-selective beta blocker."),  # same text as k1 after stripping
        _mc("k5", "Digoxin inhibits the sodium-potassium pump.", question="Same   question as e2?"),
        _mc("k6", "Metformin lowers hepatic glucose output."),
    ]
    corpus = medmcqa_knowledge_corpus(pool, exclude_ids=["e1"], exclude_questions=["same question as E2?"])
    assert corpus.ids == ["medmcqa-k1", "medmcqa-k6"]
    assert corpus[0].text == "Propranolol is a non-selective beta blocker."
    assert corpus[0].title == "Pharmacology"
    with pytest.raises(CorpusError, match="empty corpus"):
        medmcqa_knowledge_corpus(pool[:1], exclude_ids=["e1"])
    with pytest.raises(TypeError):
        medmcqa_knowledge_corpus(pool)  # the evaluation ids must be passed explicitly


def test_paragraph_corpus_errors():
    with pytest.raises(CorpusError, match="example 'q1' carries no paragraphs"):
        paragraph_corpus([QAExample("q1", "?", ["a"])], source="s")
    p = {"id": "p", "title": "T", "text": "x", "is_supporting": False}
    q = {**p, "text": "different"}
    with pytest.raises(CorpusError, match="passage id 'p' has two different texts"):
        paragraph_corpus([QAExample("q1", "?", ["a"], metadata={"paragraphs": [p]}),
                          QAExample("q2", "?", ["a"], metadata={"paragraphs": [q]})])
