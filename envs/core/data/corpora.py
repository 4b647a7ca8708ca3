"""Corpus builders: the passages a retriever searches for a question set.

- :func:`paragraph_corpus`: the union of the paragraphs that come with the questions (HotpotQA, MuSiQue,
  2WikiMultihopQA, PubMedQA), deduplicated; ids are the paragraph ids the loaders assigned
  (:func:`~envs.core.data.types.passage_id` of title + text, or ``<PMID>-<i>`` for PubMedQA), so every
  ``QAExample.gold_passage_ids`` entry is in the corpus.
- :func:`medmcqa_knowledge_corpus`: MedMCQA explanations of questions *disjoint* from the evaluation
  questions, with answer-revealing phrases removed by :func:`strip_answer_leaks`.

Example:
    >>> from envs.core.data.types import QAExample
    >>> ex = QAExample("q1", "Q?", ["x"], metadata={"paragraphs": [
    ...     {"id": "p1", "title": "T", "text": "some text", "is_supporting": True}]})
    >>> [p.id for p in paragraph_corpus([ex, ex], source="demo")]
    ['p1']
    >>> strip_answer_leaks("Ans. is 'b' i.e., Dinoprostone. It is PGE2.")
    'Dinoprostone. It is PGE2.'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

from envs.core.data.errors import CorpusError
from envs.core.data.types import Corpus, Passage, QAExample, normalize_whitespace
from envs.core.registry import Registry

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------- paragraph corpora


def paragraph_corpus(examples: Iterable[QAExample], source: str = "paragraphs") -> Corpus:
    """The union of the examples' ``metadata["paragraphs"]``, first occurrence order, deduplicated by id.

    Multi-hop paragraph ids hash title + text, so deduplicating by id is deduplicating by title + text.

    Raises:
        CorpusError: An example without paragraphs, one id with two different texts, or no paragraphs.
    """
    seen: dict[str, Passage] = {}
    for ex in examples:
        paragraphs = ex.metadata.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise CorpusError(f"{source}: example '{ex.id}' carries no paragraphs to build a corpus from")
        for p in paragraphs:
            passage = Passage(p["id"], p["title"], p["text"])
            old = seen.setdefault(passage.id, passage)
            if old != passage:
                raise CorpusError(f"{source}: passage id '{passage.id}' has two different texts "
                                  f"(second in example '{ex.id}')")
    corpus = Corpus.from_passages(seen.values(), source=source)
    log.info("%s: %d passages after deduplication", source, len(corpus))
    return corpus


def pubmedqa_corpus(examples: Iterable[QAExample], source: str = "pubmedqa") -> Corpus:
    """PubMedQA abstracts: every context paragraph one passage, id ``<PMID>-<i>`` (``i`` from 0)."""
    return paragraph_corpus(examples, source=source)


# ------------------------------------------------------------------------------- MedMCQA knowledge corpus

_Q = "\"'‘’“”`"
# What may follow a bare letter for it to count as an option letter rather than a word ("a" article):
# punctuation, end of text, "i.e.", a conjunction joining letters, or a verb ("Option C is correct").
_STRICT = r"(?=\s*(?:[.):,;&/\-–—\n]|$)|\s+(?:i\.?\s*e\b|and\b|or\b|is\b|was\b|are\b))"
_NOT_ABBREV = r"(?!\.[a-zA-Z]\.)"  # e.g. / a.m.
_NOT_GENUS = r"(?!\.\s?[a-z])"  # E. coli, B. anthracis
_TOKEN = (
    rf"(?:[{_Q}(\[]\s*[a-eA-E]\s*[{_Q})\]]"  # quoted or bracketed: 'a', (B), [c]
    rf"|[B-E](?![\w'’]){_NOT_GENUS}"  # capital B-E standing alone
    rf"|A{_NOT_GENUS}(?:{_STRICT}|(?=\s+[(A-HJ-Z]))"  # capital A is also the article: only before
    # punctuation, "(" or a capitalised word ("The answer is A Acute pyelonephritis")
    rf"|[a-e]{_NOT_ABBREV}{_STRICT})"  # lowercase: only before punctuation / i.e. / and / or
)
_TOKENS = rf"{_TOKEN}(?:\s*(?:,|&|/|\band\b|\bor\b)\s*{_TOKEN})*"
_PREFIX = (
    r"(?i:\b(?:the\s+)?(?:(?:correct|right|final|best)\s+)?"
    r"(?:ans(?:wer)?s?|options?|(?<!of\s)choices?)\b"  # "drug of choice" is not an option reference
    r"(?:\s*(?:\bis\b|\bwas\b|\b(?:will|would|should|must)\s+be\b|\bhere\b|=|:|-|–|—|\.))*\s*"
    r"(?:(?:option|choice)\s*[:.\-]?\s*)?)"
)
_TRAIL = r"(?:\s*[.):,;\-–—])?(?:\s*i\.?\s*e\.?\s*[,:\-]?)?"
_RE_PAREN_STATEMENT = re.compile(rf"\(\s*{_PREFIX}{_TOKENS}\s*[.:]?\s*\)")
_RE_STATEMENT = re.compile(rf"{_PREFIX}{_TOKENS}{_TRAIL}")
_RE_LETTER_MARK = re.compile(r"[(\[]\s*[a-eA-E]\s*[)\]]")
_RE_LEADING_ANS = re.compile(r"^\s*(?i:ans(?:wer)?)\s*[.:\-–—]+\s*")


def strip_answer_leaks(text: str) -> str:
    """Remove answer-revealing phrases and option letters from a MedMCQA explanation.

    Removes answer statements anywhere ("Ans. is 'a' i.e.,", "Ans: b", "Answer- C.", "Answer is option c",
    "The correct answer is (D)"), option references ("Option A-", "(option b)", "options A & B"), bare
    letter marks ("(a)", "[C]") and a leading "Ans." / "Answer:". Words are kept: the article "a", "Vitamin
    A", "drug of choice", "E. coli". Line breaks are kept; other whitespace is tidied.

    Example:
        >>> strip_answer_leaks("Ans: C i.e. Hypnozoite. Relapse in P. vivax is due to hypnozoites.")
        'Hypnozoite. Relapse in P. vivax is due to hypnozoites.'
        >>> strip_answer_leaks("A patient with a fever: the answer is a reduction in Vitamin A.")
        'A patient with a fever: the answer is a reduction in Vitamin A.'
    """
    out = _RE_PAREN_STATEMENT.sub(" ", text)
    out = _RE_STATEMENT.sub(" ", out)
    out = _RE_LETTER_MARK.sub(" ", out)
    out = _RE_LEADING_ANS.sub("", out)
    out = re.sub(r"\(\s*\)|\[\s*\]", " ", out)  # brackets emptied by the removals
    lines = [re.sub(r"[ \t\f\v\xa0]+", " ", ln).strip() for ln in out.split("\n")]
    out = "\n".join(lines)
    out = re.sub(r" +([.,;:)])", r"\1", out)
    out = re.sub(r"\n{3,}", "\n\n", out)
    return re.sub(r"^[\s.,;:)\-–—]+", "", out).strip()


def medmcqa_knowledge_corpus(
    examples: Iterable[QAExample],
    *,
    exclude_ids: Iterable[str],
    exclude_questions: Iterable[str] = (),
    min_chars: int = 20,
    source: str = "medmcqa-explanations",
) -> Corpus:
    """A knowledge collection from MedMCQA explanations, disjoint from the evaluation questions.

    Args:
        examples: MedMCQA examples (``metadata["exp"]`` holds the explanation).
        exclude_ids: Ids of the evaluation questions; their explanations are left out (required, so that
            a caller cannot forget it; pass ``()`` only when no MedMCQA question is evaluated).
        exclude_questions: Evaluation question texts; examples with the same (whitespace- and
            case-normalised) question are left out too, which catches duplicates under another id.
        min_chars: Explanations shorter than this after stripping are dropped.
        source: Name in logs and errors.

    Returns:
        Passages ``medmcqa-<id>`` with the subject as title and :func:`strip_answer_leaks` of the explanation
        as text, deduplicated by text.

    Raises:
        CorpusError: When nothing is left (e.g. every question is excluded).
    """
    ids = set(exclude_ids)
    questions = {normalize_whitespace(q).lower() for q in exclude_questions}
    passages: list[Passage] = []
    texts: set[str] = set()
    n_excluded = n_short = n_dup = 0
    for ex in examples:
        exp = ex.metadata.get("exp")
        if not isinstance(exp, str) or not exp.strip():
            continue
        if ex.id in ids or normalize_whitespace(ex.question).lower() in questions:
            n_excluded += 1
            continue
        text = strip_answer_leaks(exp)
        if len(text) < min_chars:
            n_short += 1
            continue
        if text in texts:
            n_dup += 1
            continue
        texts.add(text)
        title = ex.metadata.get("subject_name") or ""
        passages.append(Passage(f"medmcqa-{ex.id}", str(title), text))
    log.info("%s: %d passages (%d excluded as evaluation questions, %d too short, %d duplicates)",
             source, len(passages), n_excluded, n_short, n_dup)
    return Corpus.from_passages(passages, source=source)


#: dataset name -> builder of the corpus that comes with its questions (datasets without one are absent;
#: MedMCQA's knowledge collection needs the evaluation ids, see :func:`medmcqa_knowledge_corpus`)
CORPUS_BUILDERS: Registry[Callable[..., Corpus]] = Registry("corpus builder", dotted_paths=False)
for _name, _builder in (("hotpotqa", paragraph_corpus), ("musique", paragraph_corpus),
                        ("2wikimultihopqa", paragraph_corpus), ("pubmedqa", pubmedqa_corpus)):
    CORPUS_BUILDERS.register(_name, _builder)
