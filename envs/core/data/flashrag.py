"""FlashRAG's formats: questions JSON Lines (``id``, ``question``, ``golden_answers``, ``choices``), its corpus
JSON Lines, and writing Kairos questions and passages back in them (see :mod:`envs.core.data.loaders`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envs.core.data.errors import DataFormatError
from envs.core.data.records import (
    LoadResult,
    _dedupe,
    _get,
    _get_id,
    _iter_records,
    _kind,
    _load_simple,
    _Loc,
    _read_text,
    _rest,
    _str_list,
)
from envs.core.data.types import (
    Corpus,
    Passage,
    QAExample,
    choice_letter,
)
from envs.core.io import atomic_open

log = logging.getLogger("envs.core.data.loaders")  # the loaders' warnings keep their logger name


def _parse_flashrag(rec: dict[str, Any], loc: _Loc) -> QAExample:
    qid = _get_id(rec, "id", loc)
    question = _get(rec, "question", loc, str)
    golden = _get(rec, "golden_answers", loc, list)
    choices = _get(rec, "choices", loc, list, optional=True, allow_empty=True) or None
    if choices is not None:
        choices = _str_list(choices, loc, "choices", allow_empty_items=True)
    answers: list[str] = []
    for i, g in enumerate(golden):
        if isinstance(g, bool) or not isinstance(g, (str, int, float)):
            raise loc.error(f"golden_answers[{i}]", f"expected a string, got {_kind(g)}")
        if isinstance(g, int) and choices:  # FlashRAG multiple choice: a 0-based option index
            if not 0 <= g < len(choices):
                raise loc.error(f"golden_answers[{i}]", f"option index {g} out of range 0-{len(choices) - 1}")
            answers += [choice_letter(g), choices[g]]
        else:
            answers.append(str(g))
    answers = _dedupe(answers)
    if not answers:
        raise loc.error("golden_answers", "is empty")
    meta = dict(_get(rec, "metadata", loc, dict, optional=True, allow_empty=True, default={}))
    gold = meta.pop("gold_passage_ids", None)
    if gold is not None:
        gold = _str_list(gold, loc, "metadata.gold_passage_ids")
    meta.update(_rest(rec, ("id", "question", "golden_answers", "choices", "metadata")))
    return QAExample(qid, question.strip(), answers, choices, gold, meta)


def load_flashrag(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """FlashRAG questions JSON Lines: ``id``, ``question``, ``golden_answers``, optional ``choices`` and
    ``metadata`` (``metadata.gold_passage_ids`` becomes :attr:`QAExample.gold_passage_ids`).

    An integer golden answer of a multiple-choice item is read as a 0-based option index.
    """
    return _load_simple("flashrag", _parse_flashrag, "id", path, skip_bad_lines, limit)


def load_flashrag_corpus(path: str | Path, skip_bad_lines: bool = False) -> Corpus:
    """A FlashRAG corpus JSON Lines file: ``{"id", "contents"}`` with ``contents = "title\\ntext"``.

    Without ``contents`` the ``text`` field (and ``title``, if any) is read instead. A title wrapped in
    double quotes (as in FlashRAG's Wikipedia dumps) is unquoted. Every passage needs text: an empty ``text``, an
    empty ``contents`` and a ``contents`` holding only a title (``"Title\\n"``, or one line with no line break) are
    refused alike, naming the file and line (skipped with a warning under ``skip_bad_lines``).

    Raises:
        DataFormatError: On a malformed line or a missing field (unless ``skip_bad_lines``).
        CorpusError: On a duplicate passage id or an empty corpus.
    """
    path = Path(path)
    passages: list[Passage] = []
    skipped = 0
    _fmt, records = _iter_records(path, _read_text(path))
    for loc, rec in records:
        try:
            if isinstance(rec, DataFormatError):
                raise rec
            if not isinstance(rec, dict):
                raise loc.error(None, f"expected a JSON object, got {_kind(rec)}")
            pid = _get_id(rec, "id", loc)
            if "contents" in rec or "text" not in rec:
                contents = _get(rec, "contents", loc, str)
                title, _, text = contents.partition("\n")
                if not text.strip():  # the same rule as an empty `text` (or `contents`): no passage to retrieve
                    raise loc.error("contents", f"has a title ({title.strip()[:60]!r}) but no text after it "
                                                "(FlashRAG contents are \"title\\ntext\": put the passage text "
                                                "after the first line break)")
            else:
                text = _get(rec, "text", loc, str)
                title = _get(rec, "title", loc, str, optional=True, allow_empty=True, default="")
            title = title.strip()
            if len(title) >= 2 and title[0] == title[-1] == '"':
                title = title[1:-1]
            passages.append(Passage(pid, title, text.strip()))
        except DataFormatError as e:
            if not skip_bad_lines:
                raise
            log.warning("skipping bad corpus record: %s", e)
            skipped += 1
    log.info("loaded %d passages from %s%s", len(passages), path, f" (skipped {skipped})" if skipped else "")
    return Corpus.from_passages(passages, source=str(path))


def write_flashrag(
    examples: Iterable[QAExample], corpus: Corpus | None, out_dir: str | Path
) -> dict[str, Path]:
    """Write ``questions.jsonl`` (and ``corpus.jsonl`` when ``corpus`` is given) in FlashRAG format.

    Each file is written atomically. Questions carry ``id``, ``question``, ``golden_answers`` (the answers,
    for multiple choice ``[letter, option text]``), ``choices`` when present, and ``metadata`` (the
    example's metadata plus ``gold_passage_ids``), so :func:`load_flashrag` reads back the same examples.
    Corpus lines are ``{"id", "contents": "title\\ntext"}`` (newlines in a title become spaces).

    Returns:
        ``{"questions": path, "corpus": path}`` (``corpus`` only when written).
    """
    out = Path(out_dir)
    paths = {"questions": out / "questions.jsonl"}
    n = 0
    with atomic_open(paths["questions"], "w", encoding="utf-8") as f:
        for ex in examples:
            item: dict[str, Any] = {"id": ex.id, "question": ex.question, "golden_answers": list(ex.answers)}
            if ex.choices:
                item["choices"] = list(ex.choices)
            meta = dict(ex.metadata)
            if ex.gold_passage_ids is not None:
                meta["gold_passage_ids"] = list(ex.gold_passage_ids)
            item["metadata"] = meta
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
            n += 1
    log.info("wrote %d questions to %s", n, paths["questions"])
    if corpus is not None:
        paths["corpus"] = out / "corpus.jsonl"
        with atomic_open(paths["corpus"], "w", encoding="utf-8") as f:
            for p in corpus:
                title = " ".join(p.title.splitlines())
                f.write(json.dumps({"id": p.id, "contents": f"{title}\n{p.text}"}, ensure_ascii=False) + "\n")
        log.info("wrote %d passages to %s", len(corpus), paths["corpus"])
    return paths
