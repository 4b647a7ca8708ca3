"""Reading a dataset file record by record, and checked field access (the loaders' shared helpers).

Every problem is a :class:`~envs.core.data.errors.DataFormatError` naming the file, the line (JSON Lines) or record
(whole-file JSON) and the field; see :mod:`envs.core.data.loaders`."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.core.data.errors import DataFormatError
from envs.core.data.types import (
    QAExample,
    normalize_whitespace,
    passage_id,
)

log = logging.getLogger("envs.core.data.loaders")  # the loaders' warnings keep their logger name

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

def _load_simple(dataset: str, parse: Callable[[dict[str, Any], _Loc], QAExample], id_field: str,
                 path: str | Path, skip_bad_lines: bool, limit: int | None) -> LoadResult:
    path = Path(path)
    fmt, records = _iter_records(path, _read_text(path))
    return _collect(dataset, path, fmt, records, parse, id_field, skip_bad_lines, limit)
