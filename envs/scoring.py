"""Answer scoring: SQuAD-style exact match and token F1, multiple-choice and yes/no/maybe accuracy.

Two ways to read an answer out of a model's text (:func:`extract_answer`):

- ``strict``: only an explicit ``Answer: X`` line counts (the last one; ``Final answer:`` and markdown bold
  are tolerated). For multiple choice, X must be an option letter ("B", "(B)", "B.", "B) Paris",
  "option B") or an option's text (exactly, or followed by punctuation: "Yes, because ..."). Anything
  else is *no answer* and scores 0.
- ``lenient``: the strict reading first, then heuristics: "the answer is X" anywhere, "option B", "(B)",
  a line starting "B." / "B)", a leading "Yes,", an option's text appearing in the last line / the text.

Option letters are only read where the context makes them letters: the article "a" ("a fever"), the
pronoun "I" ("I think"), a sentence starting "A patient ..." are never options.

Example:
    >>> from envs.core.data.types import QAExample
    >>> score("Step 1: ...\\nAnswer: the Eiffel Tower.", QAExample("q", "?", ["Eiffel Tower"]))
    {'em': 1.0, 'f1': 1.0, 'acc': 1.0}
    >>> mc = QAExample("m", "?", ["B", "London"], choices=["Paris", "London", "Rome"])
    >>> text = "I think the answer is (B)."
    >>> score(text, mc, "strict")["acc"], score(text, mc, "lenient")["acc"]
    (0.0, 1.0)
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from envs.core.data.types import QAExample, choice_letter

Mode = Literal["strict", "lenient"]
MODES: tuple[str, ...] = ("strict", "lenient")

# ------------------------------------------------------------------------------------------ normalisation

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _is_punct(ch: str) -> bool:
    return ch in _PUNCT or unicodedata.category(ch).startswith("P")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: Unicode NFKC, lowercase, drop punctuation (ASCII and Unicode), drop a/an/the, squash
    spaces.

    NFKC (not only NFC) because this normalisation is lossy anyway: a gold answer in decomposed form (NFD: ``e`` +
    combining accent) equals its composed prediction, and compatibility forms (full-width ``Ｐａｒｉｓ``, ligatures,
    superscripts) equal their plain letters. Every scoring function reads answers through this one.

    Example:
        >>> normalize_answer("  The  U.S. “Army”! ")
        'us army'
        >>> normalize_answer("Cafe\u0301") == normalize_answer("Caf\u00e9") == "caf\u00e9"
        True
    """
    text = "".join(ch for ch in unicodedata.normalize("NFKC", text).lower() if not _is_punct(ch))
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golds(gold_answers: str | Sequence[str]) -> list[str]:
    return [gold_answers] if isinstance(gold_answers, str) else list(gold_answers)


def exact_match(prediction: str, gold_answers: str | Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold alias, else 0.0."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in _golds(gold_answers)))


def _f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred), normalize_answer(gold)
    # HotpotQA's official rule: a yes/no/noanswer answer is right or wrong as a whole.
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    if not pt or not gt:
        return float(pt == gt)
    common = sum((Counter(pt) & Counter(gt)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pt), common / len(gt)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, gold_answers: str | Sequence[str]) -> float:
    """SQuAD token F1 of the normalised texts, the maximum over gold aliases.

    Example:
        >>> round(token_f1("the Eiffel tower in Paris", ["Eiffel Tower", "La tour Eiffel"]), 3)
        0.667
    """
    return max((_f1(prediction, g) for g in _golds(gold_answers)), default=0.0)


def cover_match(prediction: str, gold_answers: str | Sequence[str]) -> float:
    """1.0 if some normalised gold alias appears as whole words in the normalised prediction."""
    p = f" {normalize_answer(prediction)} "
    for g in _golds(gold_answers):
        ng = normalize_answer(g)
        if (ng and f" {ng} " in p) or (not ng and not p.strip()):
            return 1.0
    return 0.0


# ------------------------------------------------------------------------------------ answer extraction

_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*(?:final[ \t]+)?answer[ \t*_]*[:：](.*)$", re.IGNORECASE | re.MULTILINE
)
_ANSWER_IS = re.compile(
    r"\banswer\s*(?:is|was|would\s+be|should\s+be|will\s+be|must\s+be|[:：=])\s*", re.IGNORECASE
)
_ANSWER_PHRASE = re.compile(_ANSWER_IS.pattern + r"(.+?)(?=\.\s|\.$|\n|$)", re.IGNORECASE)
_MARKUP = " \t*_`\"'“”‘’$"


def _clean(fragment: str) -> str:
    return fragment.strip().strip(_MARKUP).strip()


def _answer_line(text: str) -> str | None:
    """Content of the last non-empty ``Answer: X`` line, or ``None``."""
    found = None
    for m in _ANSWER_LINE.finditer(text):
        content = _clean(m.group(1))
        if content:
            found = content
    return found


def _free_form(text: str, mode: Mode) -> str | None:
    line = _answer_line(text)
    if line is not None:
        return line.rstrip(".").strip() or None
    if mode == "strict":
        return None
    phrases = [_clean(m.group(1)) for m in _ANSWER_PHRASE.finditer(text)]
    phrases = [p for p in phrases if p]
    if phrases:
        return phrases[-1].rstrip(".").strip()
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


# ----- multiple choice

# What may follow a bare option letter: the end, punctuation, a spaced dash/colon or "(" - not a word, so
# the article "a", the pronoun "I" and "A patient ..." are not letters. B-H, J-Z (not words on their own)
# may also be followed by a word ("Answer: C because ..."), unless they abbreviate one ("C. difficile").
_FOLLOW = r"(?=$|\s*[.):,;\]*_'\"”’]|\s+[-–—:]|\s+\()"
_NOT_GENUS = r"(?!\.\s?[a-z])"
_BARE_LETTER = rf"(?:([A-Za-z]){_NOT_GENUS}{_FOLLOW}|([B-HJ-Z])(?![\w'’-]){_NOT_GENUS})"


def _letter_index(letter: str, n: int) -> int | None:
    i = ord(letter.upper()) - ord("A")
    return i if 0 <= i < n else None


def _norm_choices(choices: Sequence[str]) -> list[str]:
    return [normalize_answer(c) for c in choices]


def _letter_at_start(fragment: str, n: int) -> int | None:
    """An option letter opening ``fragment`` ("B", "(B)", "B.", "B) text", "option B", "[b]")."""
    s = _clean(fragment)
    m = re.match(r"(?i:(?:option|choice)\s*)?[(\[]\s*([A-Za-z])\s*[)\]]", s) or re.match(
        rf"(?i:(?:option|choice)\s*)?{_BARE_LETTER}", s
    )
    return _letter_index(m.group(1) or m.group(2), n) if m else None


def _text_at_start(fragment: str, choices: Sequence[str]) -> int | None:
    """An option's text equal to ``fragment``, or opening it followed by punctuation ("Yes, because")."""
    f = _clean(fragment)
    nf = normalize_answer(f)
    norm = _norm_choices(choices)
    if nf and nf in norm:
        return norm.index(nf)
    best: tuple[int, int] | None = None  # (length, index): the longest option text that opens the fragment
    for i, c in enumerate(choices):
        c = c.strip()
        opens = c and f.lower().startswith(c.lower()) and len(f) > len(c) and _is_punct(f[len(c)])
        if opens and (best is None or len(c) > best[0]):
            best = (len(c), i)
    return best[1] if best else None


def _parse_strict(fragment: str, choices: Sequence[str]) -> int | None:
    i = _letter_at_start(fragment, len(choices))
    return i if i is not None else _text_at_start(fragment, choices)


def _last_letter(pattern: str, text: str, n: int, flags: int = 0) -> int | None:
    found = None
    for m in re.finditer(pattern, text, flags):
        i = _letter_index(m.group(1), n)
        if i is not None:
            found = i
    return found


def _letters_anywhere(text: str, n: int) -> int | None:
    """Structured option letters anywhere, strongest form first, last occurrence within a form."""
    for pattern, flags in (
        (r"\b(?:option|choice)\s*[(\[]?\s*([A-Za-z])\s*[)\]]?(?![\w'’-])", re.IGNORECASE),
        (r"[(\[]\s*([A-Z])\s*[)\]]", 0),
        (r"\*\*\s*\(?([A-Z])\)?[.:]?\s*\*\*", 0),
    ):
        i = _last_letter(pattern, text, n, flags)
        if i is not None:
            return i
    # "B." / "B)" opening a line; several different letters there is an echoed option list, not an answer
    starts = {_letter_index(m.group(1), n)
              for m in re.finditer(r"^\s*([A-Z])[.):](?:\s|$)", text, re.MULTILINE)}
    starts.discard(None)
    return starts.pop() if len(starts) == 1 else None


def _text_anywhere(text: str, choices: Sequence[str]) -> int | None:
    """The option whose normalised text occurs last in ``text`` (longer texts win overlaps)."""
    nt = f" {normalize_answer(text)} "
    best: tuple[int, int, int] | None = None  # (end, length, index)
    for i, c in enumerate(_norm_choices(choices)):
        if not c:
            continue
        pos = nt.rfind(f" {c} ")
        if pos >= 0:
            key = (pos + len(c), len(c), i)
            if best is None or key[:2] > best[:2]:
                best = key
    return best[2] if best else None


def _is_yes_no_maybe(choices: Sequence[str]) -> bool:
    return sorted(normalize_answer(c) for c in choices) in (["maybe", "no", "yes"], ["no", "yes"])


def extract_choice(text: str, choices: Sequence[str], mode: Mode = "lenient") -> int | None:
    """0-based index of the option ``text`` answers, or ``None``.

    Example:
        >>> extract_choice("Answer: (C)", ["x", "y", "z"], "strict")
        2
        >>> extract_choice("A patient with a fever needs option b", ["x", "y", "z"], "lenient")
        1
        >>> extract_choice("A patient with a fever", ["x", "y", "z"], "lenient") is None
        True
    """
    _check_mode(mode)
    # composed Unicode (NFC) on both sides: option texts are also compared as written ("Yes, because ...")
    text, choices = unicodedata.normalize("NFC", text), [unicodedata.normalize("NFC", c) for c in choices]
    n = len(choices)
    line = _answer_line(text)
    if line is not None:
        i = _parse_strict(line, choices)
        if i is not None or mode == "strict":
            return i
    elif mode == "strict":
        return None
    # lenient from here on
    if line is not None:
        i = _letters_anywhere(line, n)
        if i is None:
            i = _text_anywhere(line, choices)
        if i is not None:
            return i
    found = None
    for m in _ANSWER_IS.finditer(text):
        rest = text[m.end():]
        i = _parse_strict(rest.split("\n", 1)[0], choices)
        if i is None:
            i = _text_at_start(re.split(r"(?<=[.!?])\s", rest, maxsplit=1)[0], choices)
        if i is not None:
            found = i
    if found is not None:
        return found
    i = _letters_anywhere(text, n)
    if i is not None:
        return i
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    if _is_yes_no_maybe(choices):
        i = _text_at_start(lines[0].split()[0], choices) if lines[0].split() else None
        if i is not None:
            return i
        return _text_anywhere(lines[-1], choices)  # "no" is too common in reasoning to search everywhere
    for fallback in (lambda: _text_anywhere(lines[-1], choices), lambda: _text_anywhere(text, choices),
                     lambda: _last_letter(r"(?<![\w'’.-])([A-HJ-Z])[\s.)*_]*$", lines[-1], n)):
        i = fallback()
        if i is not None:
            return i
    return None


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown extraction mode '{mode}' (valid: {', '.join(MODES)})")


def extract_answer(text: str, mode: Mode = "lenient", choices: Sequence[str] | None = None) -> str | None:
    """The answer ``text`` gives, or ``None`` when it gives none (in ``strict`` mode: no ``Answer:`` line).

    Args:
        text: The model's output.
        mode: ``"strict"`` or ``"lenient"`` (see the module docstring).
        choices: The options of a multiple-choice question; then the result is the option letter.

    Example:
        >>> extract_answer("Step 1: Paris is in France.\\nAnswer: Paris.", "strict")
        'Paris'
        >>> text = "So the answer is Paris."
        >>> extract_answer(text, "strict") is None, extract_answer(text, "lenient")
        (True, 'Paris')
    """
    _check_mode(mode)
    if choices:
        i = extract_choice(text, choices, mode)
        return None if i is None else choice_letter(i)
    return _free_form(text, mode)


def score(prediction_text: str, example: QAExample, mode: Mode = "lenient") -> dict[str, float]:
    """Score a model's output against an example.

    Multiple choice (``example.choices``): ``acc`` = the extracted option is the gold one; ``em`` and
    ``f1`` equal ``acc``. Open questions: ``em`` and ``f1`` (SQuAD, max over aliases) of the extracted
    answer, and ``acc`` = a gold alias appears in it (:func:`cover_match`). No answer scores 0.

    Raises:
        ValueError: A multiple-choice example whose gold option cannot be resolved, or an unknown mode.
    """
    _check_mode(mode)
    if example.choices:
        gold = example.answer_index
        if gold is None:
            raise ValueError(f"example '{example.id}': gold option not found among its choices "
                             f"(answers {example.answers})")
        acc = float(extract_choice(prediction_text, example.choices, mode) == gold)
        return {"em": acc, "f1": acc, "acc": acc}
    answer = _free_form(prediction_text, mode)
    if answer is None:
        return {"em": 0.0, "f1": 0.0, "acc": 0.0}
    return {"em": exact_match(answer, example.answers), "f1": token_f1(answer, example.answers),
            "acc": cover_match(answer, example.answers)}
