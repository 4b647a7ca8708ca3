"""Crash-safe file helpers: every file Kairos writes goes through an atomic rename."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_UMASK = os.umask(0)
os.umask(_UMASK)


class OutputError(OSError, ValueError):
    """Writing (or creating) a file or folder failed for an operating-system reason — a full disk, a read-only file
    system, no permission: the message is one line naming the path and the cause. An :class:`OSError` (callers that
    handle OS errors still do, ``errno`` kept) and a :class:`ValueError` (every CLI prints it as its one error
    line)."""

    def __str__(self) -> str:  # the one line, not OSError's "[Errno N] strerror: filename"
        return str(self.args[0]) if self.args else ""


#: errno -> what it means for a write, in words a user acts on
_CAUSES = {
    errno.ENOSPC: "no space left on the device (free some space, then rerun: finished work is kept)",
    errno.EDQUOT: "disk quota exceeded (free some space, then rerun: finished work is kept)",
    errno.EROFS: "the file system is read-only (choose a writable output folder)",
    errno.EACCES: "permission denied (choose a folder you can write to, or fix its permissions)",
    errno.EPERM: "operation not permitted (choose a folder you can write to, or fix its permissions)",
    errno.ENOTDIR: "a path component is a file, not a folder",
    errno.EISDIR: "it is a folder, not a file",
    errno.EIO: "input/output error (a failing disk or a lost network mount)",
    errno.EEXIST: "a file of that name is in the way (a folder is needed there)",
    errno.ENOENT: "no such file or folder (a parent folder is missing and cannot be created there)",
}


def describe_os_error(e: BaseException, path: str | Path | None = None, what: str | None = None) -> str:
    """One line naming the path (the error's own file name, else ``path``) and the cause of an OS error —
    ``cannot <what> <path>: <cause>``, or ``<path>: <cause>`` without ``what``. An error raised with a message of
    its own (no errno) is that message."""
    if isinstance(e, OutputError):
        return str(e)
    code = getattr(e, "errno", None)
    if code is None:  # a library's OSError (pyarrow's) may carry the errno in its text only
        import re

        m = re.search(r"\[Errno (\d+)\]|errno[ =:]+(\d+)", str(e))
        code = int(m.group(1) or m.group(2)) if m else None
    if code is None:
        text = str(e) or type(e).__name__
        return f"cannot {what} {path}: {text}" if what and path is not None else text
    name = getattr(e, "filename", None) or path
    cause = _CAUSES.get(code) or getattr(e, "strerror", None) or str(e)
    if name is None:
        return f"cannot {what}: {cause}" if what else cause
    return f"cannot {what} {name}: {cause}" if what else f"{name}: {cause}"


def output_error(e: OSError, path: str | Path | None = None, what: str = "write") -> OutputError:
    """``e`` as an :class:`OutputError` (errno and file name kept)."""
    if isinstance(e, OutputError):
        return e
    err = OutputError(describe_os_error(e, path, what))
    err.errno = getattr(e, "errno", None)
    err.filename = getattr(e, "filename", None) or (str(path) if path is not None else None)
    return err


@contextlib.contextmanager
def writing(path: str | Path | None, what: str = "write") -> Iterator[None]:
    """Any :class:`OSError` raised inside (a full disk, a read-only or forbidden folder — from Python, a library or
    pyarrow) becomes an :class:`OutputError` naming ``path`` (when the error names no file) and the cause."""
    try:
        yield
    except OutputError:
        raise
    except OSError as e:
        raise output_error(e, path, what) from e


def make_dir(path: str | Path) -> Path:
    """``mkdir -p`` whose failure is one line naming the folder (:class:`OutputError`)."""
    path = Path(path)
    with writing(path, "create the folder"):
        path.mkdir(parents=True, exist_ok=True)
    return path


def append_line(path: str | Path, line: str) -> None:
    """Append one line (a newline added) to a text file and flush it to disk; an OS error names the file."""
    with writing(path), open(path, "a", encoding="utf-8") as f:
        f.write(line if line.endswith("\n") else line + "\n")
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kw: Any) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success fsync and rename it over ``path``.

    A crash in the middle leaves the old file (or none), never a half-written one.
    An OS error (a full disk, a read-only or forbidden folder) is an :class:`OutputError` naming ``path``.
    """
    path = Path(path)
    make_dir(path.parent)
    if path.is_dir():  # else os.replace fails naming the temporary file, not the path the caller gave
        err = OutputError(f"cannot write {path}: it is a folder, not a file; give the path of a file (in it, or "
                          "elsewhere)")
        err.errno, err.filename = errno.EISDIR, str(path)
        raise err
    with writing(path):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, mode, **kw) as f:
            yield f
            with writing(path):
                f.flush()
                os.fsync(f.fileno())
        with writing(path):
            os.replace(tmp, path)
    except OSError as e:  # e.g. the caller's own f.write hit a full disk: name the file we were writing
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise output_error(e, path) from e
    except BaseException:
        with contextlib.suppress(OSError):
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
