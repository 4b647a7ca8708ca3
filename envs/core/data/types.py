"""The data layer's value types: questions (:class:`QAExample`), passages and corpora.

Conventions every loader follows:

- ``answers`` holds gold aliases. For multiple-choice questions it holds the gold option's letter and/or
  text: ``[letter, text]`` for MedMCQA, MedQA and MMLU-Pro (``"A"`` is ``choices[0]``), ``[decision]`` for
  PubMedQA (choices ``yes``/``no``/``maybe``); :attr:`QAExample.answer_index` resolves either form.
- Passage ids of question-set paragraphs come from :func:`passage_id` (a hash of title and text), so the
  same paragraph gets the same id in every question, every subset and both file formats, and
  ``gold_passage_ids`` can be looked up in the corpus built from the same questions.

Example:
    >>> c = Corpus.from_passages([Passage("p1", "Paris", "Paris is the capital of France.")], source="demo")
    >>> len(c), c.get("p1").title, c[0].id
    (1, 'Paris', 'p1')
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from envs.core.data.errors import CorpusError


def choice_letter(index: int) -> str:
    """The option letter of a 0-based choice index (0 -> ``"A"``)."""
    if not 0 <= index < 26:
        raise ValueError(f"choice index out of range: {index}")
    return chr(ord("A") + index)


def normalize_whitespace(text: str) -> str:
    """Collapse every run of whitespace (newlines included) to one space and strip the ends."""
    return " ".join(text.split())


def passage_id(title: str, text: str) -> str:
    """Stable id of a paragraph: the first 16 hex digits of SHA-256 over ``title``, NUL, ``text``.

    Example:
        >>> len(passage_id("Paris", "Paris is the capital of France."))
        16
    """
    return hashlib.sha256(f"{title}\x00{text}".encode()).hexdigest()[:16]


@dataclass
class QAExample:
    """One question with its gold answers.

    Attributes:
        id: Unique within its dataset file.
        question: The question text (for multiple choice: without the options).
        answers: Gold aliases; for multiple choice the gold letter and/or text (see module docstring).
        choices: Option texts in order (``None`` for open questions).
        gold_passage_ids: Ids of the supporting passages in the corpus built from the same file, or ``None``
            when the dataset has no passage-level supervision.
        metadata: Everything else the file carries (paragraphs, type, level, hop count, explanation, ...).
    """

    id: str
    question: str
    answers: list[str]
    choices: list[str] | None = None
    gold_passage_ids: list[str] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_multiple_choice(self) -> bool:
        """Whether the question has options."""
        return bool(self.choices)

    @property
    def answer_index(self) -> int | None:
        """0-based index of the gold option (``None`` for open questions or an unresolvable answer).

        Resolved from the first answer that is an option letter in range, else the first answer whose text
        equals an option's text (case- and whitespace-insensitive).
        """
        if not self.choices:
            return None
        n = len(self.choices)
        for a in self.answers:
            s = a.strip()
            if len(s) == 1 and s.isalpha() and s.isupper() and ord(s) - ord("A") < n:
                return ord(s) - ord("A")
        norm = [normalize_whitespace(c).lower() for c in self.choices]
        for a in self.answers:
            key = normalize_whitespace(a).lower()
            if key in norm:
                return norm.index(key)
        return None

    @property
    def answer_letter(self) -> str | None:
        """The gold option letter, or ``None``."""
        i = self.answer_index
        return None if i is None else choice_letter(i)


@dataclass(frozen=True)
class Passage:
    """One retrievable passage."""

    id: str
    title: str
    text: str


class Corpus(Sequence[Passage]):
    """An ordered, id-unique collection of passages.

    Build it with :meth:`from_passages`, which checks ids. Indexing is positional (``corpus[0]``);
    :meth:`get` looks a passage up by id.

    Example:
        >>> c = Corpus.from_passages([Passage("a", "T", "x"), Passage("b", "U", "y")], source="demo")
        >>> [p.id for p in c], "b" in c, c.get("zz") is None
        (['a', 'b'], True, True)
        >>> Corpus.from_passages([Passage("a", "T", "x"), Passage("a", "U", "y")], source="demo")
        Traceback (most recent call last):
        ...
        envs.core.data.errors.CorpusError: demo: duplicate passage id 'a' (positions 0 and 1)
    """

    def __init__(self, passages: list[Passage], index: dict[str, int], source: str) -> None:
        """Use :meth:`from_passages`; this constructor trusts its arguments."""
        self._passages = passages
        self._index = index
        self.source = source

    @classmethod
    def from_passages(cls, passages: Iterable[Passage], source: str = "<memory>") -> Corpus:
        """Build a corpus, keeping the given order.

        Args:
            passages: The passages.
            source: Where they come from (file, dataset); named in error messages.

        Raises:
            CorpusError: On a duplicate id (naming it and both positions) or when there are no passages.
        """
        items = list(passages)
        if not items:
            raise CorpusError(f"{source}: empty corpus")
        index: dict[str, int] = {}
        for i, p in enumerate(items):
            if not isinstance(p, Passage):
                raise CorpusError(f"{source}: item {i} is a {type(p).__name__}, not a Passage")
            first = index.setdefault(p.id, i)
            if first != i:
                raise CorpusError(f"{source}: duplicate passage id '{p.id}' (positions {first} and {i})")
        return cls(items, index, source)

    def __len__(self) -> int:
        return len(self._passages)

    def __iter__(self) -> Iterator[Passage]:
        return iter(self._passages)

    @overload
    def __getitem__(self, i: int) -> Passage: ...

    @overload
    def __getitem__(self, i: slice) -> list[Passage]: ...

    def __getitem__(self, i: int | slice) -> Passage | list[Passage]:
        return self._passages[i]

    def __contains__(self, item: object) -> bool:
        """``id in corpus`` (a string) or ``passage in corpus``."""
        if isinstance(item, str):
            return item in self._index
        return isinstance(item, Passage) and self._index.get(item.id) is not None and (
            self._passages[self._index[item.id]] == item
        )

    def get(self, pid: str, default: Passage | None = None) -> Passage | None:
        """The passage with id ``pid``, or ``default``."""
        i = self._index.get(pid)
        return default if i is None else self._passages[i]

    @property
    def ids(self) -> list[str]:
        """Passage ids in corpus order."""
        return [p.id for p in self._passages]

    def fingerprint(self) -> str:
        """Hex SHA-256 over every passage's id, title and text, in order (stable across runs and machines).

        Fields are JSON-encoded, so ``("ab", "c")`` and ``("a", "bc")`` hash differently.
        """
        h = hashlib.sha256()
        for p in self._passages:
            h.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False).encode())
            h.update(b"\n")
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"Corpus({len(self)} passages from {self.source!r})"
