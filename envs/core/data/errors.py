"""Errors raised by the data layer.

All of them are :class:`ValueError` subclasses, so the ``kairos`` CLI prints them as one clean line. A
:class:`DataFormatError` always names the file and, where there is one, the 1-based line (JSON Lines) or the
record (whole-file JSON: list index or object key) and the field, e.g.
``dev.jsonl:17: field 'question': missing``.
"""

from __future__ import annotations

from pathlib import Path

from envs.core.registry import UnknownNameError


class DataFormatError(ValueError):
    """A data file does not match the format its loader expects.

    Attributes:
        path: The file.
        line: 1-based line number for JSON Lines files; ``None`` for whole-file JSON or whole-file problems.
        field: The offending field (dotted/indexed, e.g. ``contexts[3].title``), or ``None``.
        record: For whole-file JSON, the list index or object key of the offending record, else ``None``.
        problem: What is wrong, in words.

    Example:
        >>> str(DataFormatError("dev.jsonl", 3, "question", "missing"))
        "dev.jsonl:3: field 'question': missing"
        >>> str(DataFormatError("dev.json", None, "answer", "missing", record=12))
        "dev.json: record 12: field 'answer': missing"
    """

    def __init__(
        self,
        path: str | Path,
        line: int | None,
        field: str | None,
        problem: str,
        record: int | str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.record = record
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        if record is not None and line is None:
            where += f": record {record}"
        what = problem if field is None else f"field '{field}': {problem}"
        super().__init__(f"{where}: {what}")

    def __reduce__(self):  # keep the structured fields when pickled (multiprocessing, ray)
        return (type(self), (self.path, self.line, self.field, self.problem, self.record))


class UnknownDatasetError(UnknownNameError):
    """A dataset name that no loader is registered under; the message lists the valid names."""


class CorpusError(ValueError):
    """A corpus that cannot be built: duplicate passage id, no passages at all."""
