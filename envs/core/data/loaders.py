"""Dataset loaders: one function per published file format, each returning :class:`LoadResult`.

A :class:`LoadResult` *is* a ``list[QAExample]`` (a list subclass) that also carries how many records were
skipped (``skipped``, ``skipped_at``) and which file format was detected (``fmt``).

Every loader checks what it reads: a malformed JSON line, a missing or mistyped field, an empty file, a
duplicate id all raise :class:`~envs.core.data.errors.DataFormatError` naming the file, the 1-based line (JSON
Lines) or record (whole-file JSON) and the field. With ``skip_bad_lines=True`` a bad record is logged as a
warning and counted in ``LoadResult.skipped`` instead; problems with the whole file (empty, not JSON at
all) always raise. Blank lines in JSON Lines files are not records and are ignored.

Formats (see ``/work/shared/data/SOURCES.md`` and each function's docstring):

- ``hotpotqa``: IRCoT JSON Lines (``question_id``, ``question_text``, ``answers_objects``, ``contexts``) or
  the original HotpotQA JSON list (``_id``, ``question``, ``answer``, ``supporting_facts``, ``context``).
  ``musique`` and ``2wikimultihopqa`` read their original schemas and the IRCoT format too.
- ``medmcqa``, ``medqa``, ``mmlu_pro``: multiple choice, JSON Lines (a JSON list works too).
- ``pubmedqa``: one JSON object keyed by PMID.
- ``flashrag``: FlashRAG questions JSON Lines (``id``, ``question``, ``golden_answers``, ``choices``).

Datasets that carry paragraphs store them in ``metadata["paragraphs"]`` as
``{"id", "title", "text", "is_supporting"}`` dicts (the corpus builders in :mod:`envs.core.data.corpora` read
them); ``gold_passage_ids`` are the ids of the supporting ones. Multi-hop paragraph text is
whitespace-normalised (runs of spaces/newlines -> one space), so the IRCoT and original HotpotQA files give
the same passage ids. Fields a loader does not interpret are kept in ``metadata`` under their file names.

Example:
    >>> qs = load_dataset("hotpotqa", shared_data_dir() / "hotpotqa/dev_500.jsonl")  # doctest: +SKIP
    >>> len(qs), qs.skipped, qs[0].answers  # doctest: +SKIP
    (500, 0, ['Chief of Protocol'])
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.data.errors import DataFormatError, UnknownDatasetError
from envs.core.data.types import (
    Corpus,
    Passage,
    QAExample,
    choice_letter,
    normalize_whitespace,
    passage_id,
)
from envs.core.io import atomic_open
from envs.core.registry import Registry

log = logging.getLogger(__name__)

YES_NO_MAYBE = ["yes", "no", "maybe"]


class LoadResult(list[QAExample]):
    """The examples of one file (a plain ``list[QAExample]``) plus what loading skipped.

    Attributes:
        dataset: Registry name of the loader.
        path: The file read.
        fmt: Detected format (``"ircot"``, ``"original"``, ``"jsonl"``, ``"json"``, ...).
        skipped: Number of bad records skipped (always 0 unless ``skip_bad_lines=True``).
        skipped_at: Where they were: line numbers (JSON Lines) or record indices/keys (whole-file JSON).
    """

    def __init__(self, examples: Iterable[QAExample] = (), *, dataset: str = "", path: str | Path = "",
                 fmt: str = "", skipped: int = 0, skipped_at: list[int | str] | None = None) -> None:
        super().__init__(examples)
        self.dataset = dataset
        self.path = Path(path)
        self.fmt = fmt
        self.skipped = skipped
        self.skipped_at: list[int | str] = list(skipped_at or [])


# ----------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class _Loc:
    """Where a record sits: line (JSON Lines) or record index/key (whole-file JSON); ``ordinal`` counts
    records from 0 in file order (used for generated ids)."""

    path: Path
    line: int | None
    record: int | str | None
    ordinal: int

    def error(self, field: str | None, problem: str) -> DataFormatError:
        return DataFormatError(self.path, self.line, field, problem, record=self.record)

    @property
    def where(self) -> str:
        return f"line {self.line}" if self.line is not None else f"record {self.record}"


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise FileNotFoundError(f"no such data file: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataFormatError(path, None, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    if not text.strip():
        raise DataFormatError(path, None, None, "empty file")
    return text


def _parse_whole_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise DataFormatError(path, e.lineno, None, f"invalid JSON: {e.msg} (column {e.colno})") from e
    except _DuplicateKey as e:
        raise DataFormatError(path, None, None, f"duplicate key '{e.key}' in a JSON object") from e


def _iter_jsonl(path: Path, text: str) -> Iterator[tuple[_Loc, Any]]:
    """(location, parsed object or DataFormatError) per non-blank line; split on ``\\n`` only (JSON strings
    may contain U+2028 and friends, which ``str.splitlines`` would break on)."""
    ordinal = 0
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        loc = _Loc(path, lineno, None, ordinal)
        ordinal += 1
        try:
            yield loc, json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as e:
            yield loc, loc.error(None, f"invalid JSON: {e.msg} (column {e.colno})")
        except _DuplicateKey as e:
            yield loc, loc.error(e.key, "duplicate key in one JSON object")


def _iter_records(path: Path, text: str) -> tuple[str, Iterator[tuple[_Loc, Any]]]:
    """Auto-detect a JSON list (first character ``[``) or JSON Lines; returns (format, records)."""
    if text.lstrip().startswith("["):
        data = _parse_whole_json(path, text)
        if not isinstance(data, list):  # pragma: no cover - "[" always parses to a list
            raise DataFormatError(path, None, None, "expected a JSON list")
        return "json", ((_Loc(path, None, i, i), rec) for i, rec in enumerate(data))
    return "jsonl", _iter_jsonl(path, text)


def _collect(
    dataset: str,
    path: Path,
    fmt: str,
    records: Iterable[tuple[_Loc, Any]],
    parse: Callable[[Any, _Loc], QAExample],
    id_field: str,
    skip_bad_lines: bool,
    limit: int | None,
) -> LoadResult:
    """Parse records into a :class:`LoadResult`: duplicate ids, skipping and ``limit`` handled here."""
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    out = LoadResult(dataset=dataset, path=path, fmt=fmt)
    seen: dict[str, _Loc] = {}
    for loc, rec in records:
        try:
            if isinstance(rec, DataFormatError):
                raise rec
            if not isinstance(rec, dict):
                raise loc.error(None, f"expected a JSON object, got {_kind(rec)}")
            ex = parse(rec, loc)
            if ex.id in seen:
                raise loc.error(id_field, f"duplicate id '{ex.id}' (first at {seen[ex.id].where})")
        except DataFormatError as e:
            if not skip_bad_lines:
                raise
            log.warning("skipping bad record: %s", e)
            out.skipped += 1
            out.skipped_at.append(loc.line if loc.line is not None else loc.record)  # type: ignore[arg-type]
            continue
        seen[ex.id] = loc
        out.append(ex)
        if limit is not None and len(out) >= limit:
            break
    if not out:
        extra = f" ({out.skipped} bad records skipped)" if out.skipped else ""
        raise DataFormatError(path, None, None, f"no usable {dataset} records{extra}")
    log.info("loaded %d %s questions from %s (%s)%s", len(out), dataset, path, fmt,
             f", skipped {out.skipped} bad records" if out.skipped else "")
    return out


# ------------------------------------------------------------------------------------------ field access

_KIND = {str: "a string", list: "a list", dict: "an object", int: "an integer", bool: "true/false"}


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {str: "a string", list: "a list", dict: "an object", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(v), type(v).__name__)


def _get(rec: dict[str, Any], key: str, loc: _Loc, tp: type, *, prefix: str = "", optional: bool = False,
         allow_empty: bool = False, default: Any = None) -> Any:
    """``rec[key]`` checked to be a ``tp`` (never a bare KeyError); ``prefix`` qualifies the field name."""
    name = prefix + key
    if key not in rec or rec[key] is None:
        if optional:
            return default
        raise loc.error(name, "missing" if key not in rec else "is null")
    v = rec[key]
    ok = isinstance(v, tp) and not (tp is int and isinstance(v, bool))
    if not ok:
        raise loc.error(name, f"expected {_KIND.get(tp, tp.__name__)}, got {_kind(v)}")
    if not allow_empty and isinstance(v, (str, list, dict)) and not (v.strip() if isinstance(v, str) else v):
        raise loc.error(name, "is empty")
    return v


def _get_id(rec: dict[str, Any], key: str, loc: _Loc) -> str:
    """An id field: a non-empty string or an integer (returned as a string)."""
    if key not in rec or rec[key] is None:
        raise loc.error(key, "missing" if key not in rec else "is null")
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise loc.error(key, f"expected a string or integer id, got {_kind(v)}")
    if not str(v).strip():
        raise loc.error(key, "is empty")
    return str(v).strip()


def _str_list(v: Any, loc: _Loc, name: str, allow_empty_items: bool = False) -> list[str]:
    if not isinstance(v, list):
        raise loc.error(name, f"expected a list, got {_kind(v)}")
    for i, item in enumerate(v):
        if not isinstance(item, str) or (not allow_empty_items and not item.strip()):
            raise loc.error(f"{name}[{i}]", f"expected a non-empty string, got {_kind(item)}")
    return list(v)


def _dedupe(items: Iterable[str]) -> list[str]:
    out: list[str] = []
    for s in items:
        s = s.strip()
        if s and s not in out:
            out.append(s)
    return out


def _rest(rec: dict[str, Any], used: Iterable[str]) -> dict[str, Any]:
    """The record's fields a loader did not interpret (kept in ``metadata``)."""
    used = set(used)
    return {k: v for k, v in rec.items() if k not in used}


def _paragraph(title: str, text: str, is_supporting: bool, pid: str | None = None, **extra: Any) -> dict:
    title, text = title.strip(), normalize_whitespace(text)
    return {"id": pid or passage_id(title, text), "title": title, "text": text,
            "is_supporting": bool(is_supporting), **extra}


def _gold_ids(paragraphs: list[dict[str, Any]]) -> list[str]:
    return _dedupe(p["id"] for p in paragraphs if p["is_supporting"])


# ----------------------------------------------------------------------------------- multi-hop (paragraphs)


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


# ------------------------------------------------------------------------------------- multiple choice


def _mc_example(qid: str, question: str, choices: list[str], gold: int, meta: dict[str, Any]) -> QAExample:
    return QAExample(qid, question.strip(), [choice_letter(gold), choices[gold].strip()], choices, None, meta)


def _parse_medmcqa(rec: dict[str, Any], loc: _Loc) -> QAExample:
    qid = _get_id(rec, "id", loc)
    question = _get(rec, "question", loc, str)
    choices = [_get(rec, k, loc, str) for k in ("opa", "opb", "opc", "opd")]
    cop = _get(rec, "cop", loc, int)
    if not 1 <= cop <= 4:
        raise loc.error("cop", f"expected 1-4 (the correct option), got {cop}")
    meta = _rest(rec, ("id", "question", "opa", "opb", "opc", "opd", "cop"))
    return _mc_example(qid, question, choices, cop - 1, meta)


def _generated_id(dataset: str, loc: _Loc) -> str:
    return f"{dataset}-{loc.path.stem}-{loc.ordinal}"


def _parse_medqa(rec: dict[str, Any], loc: _Loc) -> QAExample:
    qid = _get_id(rec, "id", loc) if "id" in rec else _generated_id("medqa", loc)
    question = _get(rec, "question", loc, str)
    options = _get(rec, "options", loc, dict)
    keys = sorted(options)
    expected = [choice_letter(i) for i in range(len(keys))]
    if keys != expected:
        raise loc.error("options", f"expected keys {', '.join(expected)}, got {', '.join(keys)}")
    choices = [_get(options, k, loc, str, prefix="options.") for k in keys]
    answer_idx = _get(rec, "answer_idx", loc, str).strip()
    if answer_idx not in options:
        raise loc.error("answer_idx", f"'{answer_idx}' is not one of the options {', '.join(keys)}")
    gold = keys.index(answer_idx)
    answer = _get(rec, "answer", loc, str, optional=True)
    if answer is not None and normalize_whitespace(answer) != normalize_whitespace(choices[gold]):
        raise loc.error("answer", f"'{answer}' does not match option {answer_idx} '{choices[gold]}'")
    return _mc_example(qid, question, choices, gold, _rest(rec, ("id", "question", "options", "answer_idx",
                                                                 "answer")))


def _parse_mmlu_pro(rec: dict[str, Any], loc: _Loc) -> QAExample:
    qid = _get_id(rec, "question_id", loc) if "question_id" in rec else _generated_id("mmlu_pro", loc)
    question = _get(rec, "question", loc, str)
    choices = _str_list(_get(rec, "options", loc, list), loc, "options")
    if len(choices) > 26:
        raise loc.error("options", f"at most 26 options, got {len(choices)}")
    letter = _get(rec, "answer", loc, str).strip()
    index = _get(rec, "answer_index", loc, int, optional=True)
    if len(letter) != 1 or not "A" <= letter <= choice_letter(len(choices) - 1):
        last = choice_letter(len(choices) - 1)
        raise loc.error("answer", f"expected an option letter A-{last}, got '{letter}'")
    gold = ord(letter) - ord("A")
    if index is not None and index != gold:
        raise loc.error("answer_index", f"{index} disagrees with answer '{letter}'")
    return _mc_example(qid, question, choices, gold, _rest(rec, ("question_id", "question", "options",
                                                                 "answer", "answer_index")))


def _load_simple(dataset: str, parse: Callable[[dict[str, Any], _Loc], QAExample], id_field: str,
                 path: str | Path, skip_bad_lines: bool, limit: int | None) -> LoadResult:
    path = Path(path)
    fmt, records = _iter_records(path, _read_text(path))
    return _collect(dataset, path, fmt, records, parse, id_field, skip_bad_lines, limit)


def load_medmcqa(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """MedMCQA JSON Lines: ``question``, ``opa``..``opd``, ``cop`` (1-4), ``exp``, ``subject_name``,
    ``topic_name``, ``id``, ``choice_type`` (``exp`` and the rest land in ``metadata``)."""
    return _load_simple("medmcqa", _parse_medmcqa, "id", path, skip_bad_lines, limit)


def load_medqa(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """MedQA (USMLE) JSON Lines: ``question``, ``options`` {A..E}, ``answer_idx`` (letter), optional
    ``answer`` (checked against the option) and ``meta_info``. The files have no id, so ids are
    ``medqa-<file stem>-<record number from 0>`` unless a record has an ``id``."""
    return _load_simple("medqa", _parse_medqa, "id", path, skip_bad_lines, limit)


def load_mmlu_pro(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """MMLU-Pro JSON Lines: ``question_id``, ``question``, ``options`` (list, up to 10), ``answer``
    (letter), ``answer_index`` (checked against the letter), ``category``, ``cot_content``, ``src``."""
    return _load_simple("mmlu_pro", _parse_mmlu_pro, "question_id", path, skip_bad_lines, limit)


def load_pubmedqa(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """PubMedQA (PQA-L): one JSON object keyed by PMID with ``QUESTION``, ``CONTEXTS``, ``LABELS``,
    ``MESHES``, ``final_decision``, ``LONG_ANSWER``.

    ``answers = [final_decision]``, ``choices = ["yes", "no", "maybe"]``; each context paragraph becomes a
    paragraph with id ``<PMID>-<i>`` (``i`` from 0) and empty title, all of them gold passages.
    ``LONG_ANSWER`` (the abstract's conclusion) stays in ``metadata`` and never enters the corpus.
    """
    path = Path(path)
    data = _parse_whole_json(path, _read_text(path))
    if not isinstance(data, dict):
        raise DataFormatError(path, None, None, f"expected one JSON object keyed by PMID, got {_kind(data)}")

    def parse(rec: dict[str, Any], loc: _Loc) -> QAExample:
        pmid = str(loc.record)
        question = _get(rec, "QUESTION", loc, str)
        contexts = _str_list(_get(rec, "CONTEXTS", loc, list), loc, "CONTEXTS")
        labels = rec.get("LABELS") if isinstance(rec.get("LABELS"), list) else []
        decision = _get(rec, "final_decision", loc, str).strip().lower()
        if decision not in YES_NO_MAYBE:
            raise loc.error("final_decision", f"expected yes/no/maybe, got '{rec['final_decision']}'")
        paragraphs = [
            {"id": f"{pmid}-{i}", "title": "", "text": text.strip(), "is_supporting": True,
             "label": labels[i] if i < len(labels) and isinstance(labels[i], str) else None}
            for i, text in enumerate(contexts)
        ]
        meta = {"paragraphs": paragraphs, **_rest(rec, ("QUESTION", "CONTEXTS", "final_decision"))}
        return QAExample(pmid, question.strip(), [decision], list(YES_NO_MAYBE), _gold_ids(paragraphs), meta)

    records = ((_Loc(path, None, k, i), v) for i, (k, v) in enumerate(data.items()))
    return _collect("pubmedqa", path, "json-object", records, parse, "PMID", skip_bad_lines, limit)


def _mmlu_subject(path: Path) -> str:
    stem = path.stem
    for suffix in ("_test", "_dev", "_val", "_validation", "_train"):
        if stem.endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def load_mmlu(path: str | Path, skip_bad_lines: bool = False, limit: int | None = None) -> LoadResult:
    """MMLU in its original CSV form (``data/test/<subject>_test.csv``): no header; each row is the question,
    the options (four in MMLU, any number from two) and the gold letter last. Ids are
    ``mmlu-<file stem>-<row number from 0>``; ``metadata["subject"]`` is the file's subject
    (``clinical_knowledge_test.csv`` → ``clinical_knowledge``). Errors name the file, the line and the column.
    """
    import csv
    import io

    path = Path(path)
    text = _read_text(path)
    subject = _mmlu_subject(path)

    def rows():
        reader = csv.reader(io.StringIO(text))
        ordinal = 0
        while True:
            line = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                yield _Loc(path, line, None, ordinal), DataFormatError(path, line, None, f"bad CSV: {e}")
                ordinal += 1
                continue
            if not row or all(not c.strip() for c in row):
                continue
            yield _Loc(path, line, None, ordinal), {"row": row}
            ordinal += 1

    def parse(rec: dict[str, Any], loc: _Loc) -> QAExample:
        row = rec["row"]
        if len(row) < 4:
            raise loc.error(None, f"expected question, at least two options and the answer letter, got {len(row)} "
                                  "column(s)")
        question, options, letter = row[0].strip(), [c.strip() for c in row[1:-1]], row[-1].strip().upper()
        if not question:
            raise loc.error("column 1 (question)", "is empty")
        for i, o in enumerate(options):
            if not o:
                raise loc.error(f"column {i + 2} (option {choice_letter(i)})", "is empty")
        if len(options) > 26:
            raise loc.error(None, f"at most 26 options, got {len(options)}")
        last = choice_letter(len(options) - 1)
        if len(letter) != 1 or not "A" <= letter <= last:
            raise loc.error(f"column {len(row)} (answer)", f"expected an option letter A-{last}, got '{row[-1]}'")
        return _mc_example(f"mmlu-{path.stem}-{loc.ordinal}", question, options, ord(letter) - ord("A"),
                           {"subject": subject})

    return _collect("mmlu", path, "csv", rows(), parse, "id", skip_bad_lines, limit)


# ------------------------------------------------------------------------------------------------ FlashRAG


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
    double quotes (as in FlashRAG's Wikipedia dumps) is unquoted.

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


# ------------------------------------------------------------------------------------------------ registry


def shared_data_dir() -> Path:
    """Where the shared real data files live: ``$KAIROS_SHARED_DATA``, else ``<repo>/../shared/data``.

    The directory may not exist (tests that need it skip); files inside are read-only inputs.
    """
    env = os.environ.get("KAIROS_SHARED_DATA")
    if env:
        return Path(env).expanduser()
    return (Path(__file__).resolve().parents[3] / ".." / "shared" / "data").resolve()


Loader = Callable[..., LoadResult]

#: dataset name -> loader ``fn(path, skip_bad_lines=False, limit=None) -> LoadResult``
LOADERS: Registry[Loader] = Registry("dataset", dotted_paths=False)
for _name, _loader in (("hotpotqa", load_hotpotqa), ("musique", load_musique),
                       ("2wikimultihopqa", load_2wikimultihopqa), ("medmcqa", load_medmcqa), ("medqa", load_medqa),
                       ("mmlu_pro", load_mmlu_pro), ("mmlu", load_mmlu), ("pubmedqa", load_pubmedqa),
                       ("flashrag", load_flashrag)):
    LOADERS.register(_name, _loader)


def resolve_dataset(name: str) -> str:
    """The registry name for ``name`` (case-insensitive, ``-`` = ``_``).

    Raises:
        UnknownDatasetError: Naming the valid datasets.
    """
    key = name.strip().lower().replace("-", "_")
    if key not in LOADERS:
        raise UnknownDatasetError("dataset", name, sorted(LOADERS.names()), dotted=False)
    return key


def load_dataset(name: str, path: str | Path, skip_bad_lines: bool = False,
                 limit: int | None = None) -> LoadResult:
    """Load the questions of dataset ``name`` from ``path``.

    Args:
        name: A key of :data:`LOADERS` (case-insensitive; ``mmlu-pro`` works too).
        path: The file.
        skip_bad_lines: Log and skip bad records (counted in ``result.skipped``) instead of raising.
        limit: Keep only the first ``limit`` good examples.

    Returns:
        The examples as a :class:`LoadResult` (a ``list[QAExample]``).

    Raises:
        UnknownDatasetError: ``name`` is not registered.
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: The file is malformed (file, line/record and field in the message).
    """
    return LOADERS.get(resolve_dataset(name))(Path(path), skip_bad_lines=skip_bad_lines, limit=limit)
