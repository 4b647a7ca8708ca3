"""Multi-hop QA with paragraphs: HotpotQA, 2WikiMultiHopQA and MuSiQue — their original schemas and the IRCoT
JSON Lines format (see :mod:`envs.core.data.loaders`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envs.core.data.records import (
    LoadResult,
    _collect,
    _dedupe,
    _get,
    _get_id,
    _gold_ids,
    _iter_records,
    _kind,
    _Loc,
    _paragraph,
    _read_text,
    _rest,
    _str_list,
)
from envs.core.data.types import (
    QAExample,
)


def _parse_ircot(rec: dict[str, Any], loc: _Loc) -> QAExample:
    """IRCoT processed format (used for HotpotQA, MuSiQue and 2Wiki alike)."""
    qid = _get_id(rec, "question_id", loc)
    question = _get(rec, "question_text", loc, str)
    answers: list[str] = []
    objs = _get(rec, "answers_objects", loc, list)
    for i, obj in enumerate(objs):
        pre = f"answers_objects[{i}]."
        if not isinstance(obj, dict):
            raise loc.error(f"answers_objects[{i}]", f"expected an object, got {_kind(obj)}")
        spans = _str_list(_get(obj, "spans", loc, list, prefix=pre, optional=True, allow_empty=True,
                               default=[]), loc, pre + "spans")
        answers += spans
        if not spans:  # DROP-style number / date answers
            number = obj.get("number")
            date = obj.get("date") if isinstance(obj.get("date"), dict) else {}
            date_s = " ".join(str(date.get(k, "")).strip() for k in ("day", "month", "year")).strip()
            answers += [str(number).strip()] if str(number or "").strip() else ([date_s] if date_s else [])
    answers = _dedupe(answers)
    if not answers:
        raise loc.error("answers_objects", "no answer (no spans, number or date)")
    paragraphs = []
    for i, c in enumerate(_get(rec, "contexts", loc, list)):
        pre = f"contexts[{i}]."
        if not isinstance(c, dict):
            raise loc.error(f"contexts[{i}]", f"expected an object, got {_kind(c)}")
        title = _get(c, "title", loc, str, prefix=pre, allow_empty=True)
        text = _get(c, "paragraph_text", loc, str, prefix=pre)
        sup = _get(c, "is_supporting", loc, bool, prefix=pre, optional=True, default=False)
        paragraphs.append(_paragraph(title, text, sup))
    meta = {"paragraphs": paragraphs, "format": "ircot",
            **_rest(rec, ("question_id", "question_text", "answers_objects", "contexts"))}
    return QAExample(qid, question.strip(), answers, None, _gold_ids(paragraphs), meta)


def _parse_titled_sentences(rec: dict[str, Any], loc: _Loc) -> QAExample:
    """Original HotpotQA / 2WikiMultihopQA: ``context`` = [[title, [sentences]]], ``supporting_facts`` =
    [[title, sentence index]]; a paragraph is supporting when its title has a supporting fact."""
    qid = _get_id(rec, "_id", loc)
    question = _get(rec, "question", loc, str)
    answer = _get(rec, "answer", loc, str)
    titles_text: list[tuple[str, str]] = []
    for i, item in enumerate(_get(rec, "context", loc, list)):
        name = f"context[{i}]"
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise loc.error(name, "expected [title, [sentences]]")
        sentences = _str_list(item[1], loc, f"{name}[1]", allow_empty_items=True)
        titles_text.append((item[0], " ".join(sentences)))
    sup_titles: set[str] = set()
    known = {t for t, _ in titles_text}
    for j, sf in enumerate(_get(rec, "supporting_facts", loc, list, allow_empty=True)):
        name = f"supporting_facts[{j}]"
        if not (isinstance(sf, list) and len(sf) == 2 and isinstance(sf[0], str)):
            raise loc.error(name, "expected [title, sentence index]")
        if sf[0] not in known:
            raise loc.error(name, f"title '{sf[0]}' is not in context")
        sup_titles.add(sf[0])
    paragraphs = [_paragraph(t, text, t in sup_titles) for t, text in titles_text]
    meta = {"paragraphs": paragraphs, "format": "original",
            **_rest(rec, ("_id", "question", "answer", "context"))}
    return QAExample(qid, question.strip(), [answer.strip()], None, _gold_ids(paragraphs), meta)


def _parse_musique(rec: dict[str, Any], loc: _Loc) -> QAExample:
    """Original MuSiQue: ``paragraphs`` [{idx, title, paragraph_text, is_supporting}], hops from
    ``question_decomposition``."""
    qid = _get_id(rec, "id", loc)
    question = _get(rec, "question", loc, str)
    answer = _get(rec, "answer", loc, str)
    aliases = _str_list(_get(rec, "answer_aliases", loc, list, optional=True, allow_empty=True, default=[]),
                        loc, "answer_aliases")
    paragraphs = []
    for i, p in enumerate(_get(rec, "paragraphs", loc, list)):
        pre = f"paragraphs[{i}]."
        if not isinstance(p, dict):
            raise loc.error(f"paragraphs[{i}]", f"expected an object, got {_kind(p)}")
        title = _get(p, "title", loc, str, prefix=pre, allow_empty=True)
        text = _get(p, "paragraph_text", loc, str, prefix=pre)
        sup = _get(p, "is_supporting", loc, bool, prefix=pre, optional=True, default=False)
        idx = _get(p, "idx", loc, int, prefix=pre, optional=True)
        paragraphs.append(_paragraph(title, text, sup, idx=idx))
    decomposition = _get(rec, "question_decomposition", loc, list, optional=True)
    meta = {"paragraphs": paragraphs, "format": "original",
            "hops": len(decomposition) if decomposition is not None else None,
            **_rest(rec, ("id", "question", "answer", "answer_aliases", "paragraphs"))}
    return QAExample(qid, question.strip(), _dedupe([answer, *aliases]), None, _gold_ids(paragraphs), meta)


def _load_multihop(dataset: str, original: Callable[[dict[str, Any], _Loc], QAExample], original_id: str,
                   path: Path, skip_bad_lines: bool, limit: int | None) -> LoadResult:
    """Pick the IRCoT or the original parser from the file's first record."""
    text = _read_text(path)
    container, records = _iter_records(path, text)
    records = iter(records)
    head: list[tuple[_Loc, Any]] = []  # records up to the first JSON object (malformed lines before it)
    for item in records:
        head.append(item)
        if isinstance(item[1], dict):
            break
    rec0 = head[-1][1] if head else None
    ircot = isinstance(rec0, dict) and ("question_text" in rec0 or "question_id" in rec0)
    fmt = f"ircot-{container}" if ircot else f"original-{container}"
    parse = _parse_ircot if ircot else original
    return _collect(dataset, path, fmt, itertools.chain(head, records), parse,
                    "question_id" if ircot else original_id, skip_bad_lines, limit)


def load_hotpotqa(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """HotpotQA: IRCoT JSON Lines or the original JSON list (detected from the content).

    IRCoT line: ``question_id``, ``question_text``, ``answers_objects[].spans``,
    ``contexts[{id, title, paragraph_text, is_supporting}]``. Original record: ``_id``, ``question``,
    ``answer``, ``supporting_facts``, ``context``, ``type``, ``level`` (the last two land in ``metadata``).
    """
    return _load_multihop("hotpotqa", _parse_titled_sentences, "_id", Path(path), skip_bad_lines, limit)


def load_2wikimultihopqa(path: str | Path, skip_bad_lines: bool = False,
                         limit: int | None = None) -> LoadResult:
    """2WikiMultihopQA: original JSON list (``_id``, ``question``, ``answer``, ``type``, ``context``,
    ``supporting_facts``, ``evidences``) or JSON Lines of the same records, or the IRCoT format."""
    return _load_multihop("2wikimultihopqa", _parse_titled_sentences, "_id", Path(path), skip_bad_lines,
                          limit)


def load_musique(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """MuSiQue: original JSON Lines (``id``, ``question``, ``answer``, ``answer_aliases``, ``paragraphs``,
    ``question_decomposition``; ``metadata["hops"]`` = its length) or the IRCoT format."""
    return _load_multihop("musique", _parse_musique, "id", Path(path), skip_bad_lines, limit)
