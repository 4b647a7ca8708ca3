"""Crash-safe file helpers: every file Kairos writes goes through an atomic rename."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kw: Any) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success fsync and rename it over ``path``.

    A crash in the middle leaves the old file (or none), never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, mode, **kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | Path, obj: Any, indent: int = 2) -> None:
    """Atomically write ``obj`` as JSON."""
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=indent, sort_keys=False, default=_json_default)
        f.write("\n")


def write_text(path: str | Path, text: str) -> None:
    """Atomically write a text file."""
    with atomic_open(path, "w") as f:
        f.write(text)


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover - numpy is a hard dependency
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def content_fingerprint(path: str | Path) -> str:
    """Hex SHA-256 of what is at ``path``: a file's bytes, or a folder's files (relative names and contents, in
    sorted order) — the same on any machine and under any absolute path."""
    import hashlib

    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    if not p.is_dir():
        raise FileNotFoundError(f"cannot fingerprint {p}: no such file or folder")
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(f"{f.relative_to(p).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def read_done_rows(path: str | Path | None, key: str = "question_index", require: tuple[str, ...] = (),
                   line_of: dict[int, int] | None = None) -> dict[int, dict[str, Any]]:
    """Rows already in a resumable per-question JSONL, by ``row[key]``; a torn last line (a crash while writing)
    is ignored (with a warning) so the caller redoes it, any other bad line — not JSON, or without ``key`` or a
    ``require``-d field — is an error naming file and line. ``line_of`` (optional) receives each row's 1-based
    line number, for the caller's own error messages. Callers rewrite the file from the returned rows
    (:func:`write_text`) before appending."""
    import logging

    if path is None or not Path(path).is_file():
        return {}
    rows: dict[int, dict[str, Any]] = {}
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                logging.getLogger(__name__).warning(
                    "%s: ignoring a torn last line (crash while writing); it will be redone", path)
                continue
            raise ValueError(f"{path}:{i + 1}: not valid JSON (delete the file to start over)") from None
        missing = [k for k in (key, *require) if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(f"{path}:{i + 1}: row without {', '.join(repr(k) for k in missing)}")
        rows[int(row[key])] = row
        if line_of is not None:
            line_of[int(row[key])] = i + 1
    return rows
