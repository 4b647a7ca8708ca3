"""Multiple choice and yes/no/maybe QA: MedMCQA, MedQA, MMLU-Pro, MMLU (CSV) and PubMedQA (see
:mod:`envs.core.data.loaders`)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

from envs.core.data.errors import DataFormatError
from envs.core.data.records import (
    YES_NO_MAYBE,
    LoadResult,
    _collect,
    _get,
    _get_id,
    _gold_ids,
    _kind,
    _load_simple,
    _Loc,
    _parse_whole_json,
    _read_text,
    _rest,
    _str_list,
)
from envs.core.data.types import (
    QAExample,
    choice_letter,
    normalize_whitespace,
)

log = logging.getLogger("envs.core.data.loaders")  # the loaders' warnings keep their logger name


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
