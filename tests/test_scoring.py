"""Answer scoring: SQuAD normalisation, EM/F1 over aliases, multiple-choice extraction, strict vs lenient."""

from __future__ import annotations

import pytest

from envs.core.data.types import QAExample
from envs.scoring import (
    cover_match,
    exact_match,
    extract_answer,
    extract_choice,
    normalize_answer,
    score,
    token_f1,
)

CHOICES = ["Paris", "London", "Rome", "Berlin"]
MC = QAExample("mc", "Capital of the UK?", ["B", "London"], choices=CHOICES)
YNM = QAExample("pq", "Does it work?", ["no"], choices=["yes", "no", "maybe"])
OPEN = QAExample("open", "Who?", ["Shirley Temple", "Shirley Temple Black"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  An   apple, a day!  ", "apple day"),
        ("U.S.A.", "usa"),
        ("“Quoted” — text…", "quoted text"),
        ("Theatre of the Absurd", "theatre of absurd"),  # "the" only as a whole word
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_and_f1_with_aliases():
    assert exact_match("the Shirley Temple.", OPEN.answers) == 1.0
    assert exact_match("Temple", OPEN.answers) == 0.0
    assert token_f1("Shirley Temple Black", ["Shirley Temple"]) == pytest.approx(0.8)
    assert token_f1("Shirley Temple Black", OPEN.answers) == 1.0  # max over aliases
    assert token_f1("nothing in common", OPEN.answers) == 0.0
    assert token_f1("a", ["the"]) == 1.0  # both normalise to empty
    assert token_f1("yes it is", ["yes"]) == 0.0  # HotpotQA: yes/no answers are all or nothing
    assert token_f1("no", "No.") == 1.0
    assert cover_match("She was Shirley Temple, the actress", OPEN.answers) == 1.0
    assert cover_match("Shirley Templeton", OPEN.answers) == 0.0  # whole words only


@pytest.mark.parametrize(
    ("text", "strict", "lenient"),
    [
        ("Answer: B", 1, 1),
        ("Answer: (b)", 1, 1),
        ("answer: B. London", 1, 1),
        ("Final answer: B)", 1, 1),
        ("**Answer:** C", 2, 2),
        ("Step 1: it is in England.\nAnswer: London.", 1, 1),
        ("Answer: option D", 3, 3),
        ("Answer: C because Rome is old", 2, 2),
        ("Answer: A. Paris\nActually no.\nAnswer: B", 1, 1),  # the last Answer line counts
        ("Answer: E", None, None),  # out of range
        ("A patient with a fever.", None, None),  # "A" opening a sentence is the article
        ("a fever is a sign of a cold", None, None),
        ("Answer: I think it's B", None, 1),  # "I" is a pronoun, not option I
        ("I believe the answer is C because Rome is old.", None, 2),
        ("The answer is (D).", None, 3),
        ("Option D is correct.", None, 3),
        ("So (C) is right.", None, 2),
        ("B) London", None, 1),
        ("A. Paris\nB. London\nC. Rome\nD. Berlin", None, 3),  # an echoed option list: no letter, last text
        ("Answer: The answer is London", None, 1),
        ("The capital is Berlin.", None, 3),
        ("It is not Paris; it is London", None, 1),
        ("", None, None),
    ],
)
def test_extract_choice(text, strict, lenient):
    assert extract_choice(text, CHOICES, "strict") == strict
    assert extract_choice(text, CHOICES, "lenient") == lenient


def test_option_letters_beyond_e():
    ten = [f"opt{i}" for i in range(10)]
    assert extract_choice("Answer: I", ten, "strict") == 8
    assert extract_choice("Answer: (J)", ten, "strict") == 9
    assert extract_choice("I think so.", ten, "lenient") is None


def test_option_text_prefers_longer_overlapping_option():
    choices = ["Vitamin B", "Vitamin B12", "Folate"]
    assert extract_choice("Deficiency of vitamin B12", choices, "lenient") == 1
    assert extract_choice("Deficiency of vitamin B.", choices, "lenient") == 0


@pytest.mark.parametrize(
    ("text", "strict", "lenient"),
    [
        ("Answer: no", 1, 1),
        ("Answer: Yes, because the trial was positive.", 0, 0),
        ("No, there is no evidence.", None, 1),
        ("Yes.", None, 0),
        ("There is no clear evidence either way, so maybe.", None, 2),
        ("Noting the data, the answer is maybe", None, 2),
        ("Answer: Nothing conclusive", None, None),
    ],
)
def test_yes_no_maybe(text, strict, lenient):
    assert extract_choice(text, YNM.choices, "strict") == strict
    assert extract_choice(text, YNM.choices, "lenient") == lenient


def test_extract_answer_free_form():
    assert extract_answer("Step 1: Paris is in France.\nAnswer: Paris.", "strict") == "Paris"
    assert extract_answer("So the answer is Paris. Then more.", "strict") is None
    assert extract_answer("So the answer is Paris. Then more.", "lenient") == "Paris"
    assert extract_answer("To answer this we need data.\nParis", "lenient") == "Paris"  # last line
    assert extract_answer("Answer:   ", "strict") is None
    assert extract_answer("", "lenient") is None
    assert extract_answer("Answer: (B)", "strict", choices=CHOICES) == "B"
    with pytest.raises(ValueError, match="unknown extraction mode"):
        extract_answer("x", "loose")  # type: ignore[arg-type]


def test_score_dispatches_on_choices():
    assert score("Answer: B", MC, "strict") == {"em": 1.0, "f1": 1.0, "acc": 1.0}
    assert score("Answer: London", MC, "strict")["acc"] == 1.0
    assert score("I'd say London", MC, "strict")["acc"] == 0.0
    assert score("I'd say London", MC, "lenient")["acc"] == 1.0
    assert score("No, it does not.", YNM, "lenient")["acc"] == 1.0
    s = score("Reasoning...\nAnswer: Shirley Temple Black, the diplomat", OPEN, "strict")
    assert s["em"] == 0.0 and 0.5 < s["f1"] < 1.0 and s["acc"] == 1.0
    assert score("She is Shirley Temple", OPEN, "strict") == {"em": 0.0, "f1": 0.0, "acc": 0.0}
    assert score("Answer: the Shirley Temple!", OPEN, "strict")["em"] == 1.0


def test_score_unresolvable_gold_option():
    bad = QAExample("bad", "?", ["Madrid"], choices=CHOICES)
    with pytest.raises(ValueError, match="gold option not found"):
        score("Answer: A", bad)
