"""The trajectory cache (docs/design.md §5): outcomes of (namespace, question, action prefix), on disk, crash-safe.

Greedy decoding makes the step that follows a given action prefix a pure function of
``(reasoner, env config, question, prefix)``. The env stores every generated step record under that key,
so repeated episodes, RL training, counterfactual evaluation and the oracle reuse them instead of
generating again.

Storage is SQLite in WAL mode: every ``put`` is its own committed transaction, so a killed process leaves
a usable cache (at worst without its last record), and several processes (parallel env copies, Ray env
runners on one machine) can share one file. A small in-memory LRU sits in front.

Records are stored with :mod:`envs.records` (compressed JSON with tagged arrays; never pickle: a cache file from
shared storage cannot run code when read). A file that is not a usable cache, or a corrupted record, is a
:class:`TrajectoryCacheError` naming the file and the fix.

Example:
    >>> import tempfile, os
    >>> c = TrajectoryCache(os.path.join(tempfile.mkdtemp(), "t.sqlite"), namespace="demo")
    >>> c.put("q1", (0, 1), {"text": "Step 1 : ..."})
    >>> c.get("q1", (0, 1))["text"], c.get("q1", (1,)) is None
    ('Step 1 : ...', True)
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from envs.records import RecordFormatError, decode, encode


def namespace_of(*parts: Any) -> str:
    """A short stable hash of whatever determines the outcomes (reasoner fingerprint, env config…)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class TrajectoryCacheError(ValueError):
    """The cache file cannot be read or written (not SQLite, corrupted, a record that does not decode — or the disk
    is full, the file read-only, locked: then ``kind`` says so and the message never advises deleting it)."""

    kind: str = "damaged"


def sqlite_failure(e: BaseException, path: Path | None) -> str:
    """What a SQLite (or OS) error on the file at ``path`` means: ``full`` (no space: SQLITE_FULL, ENOSPC, or an
    I/O error with the disk out of space), ``readonly`` (a read-only file or file system, no permission, a folder
    that cannot be opened), ``busy`` (locked by another process), ``io`` (another I/O error), ``damaged`` (not a
    SQLite file or a corrupted one: SQLITE_CORRUPT / SQLITE_NOTADB) or ``other``."""
    import errno as _errno
    import shutil

    name = str(getattr(e, "sqlite_errorname", "") or "")
    msg = str(e).lower()
    code = getattr(e, "errno", None)
    if path is not None and Path(path).is_dir():
        return "folder"
    if code in (_errno.ENOENT, _errno.ENOTDIR, _errno.EEXIST, _errno.EISDIR):
        return "path"
    if code in (_errno.ENOSPC, _errno.EDQUOT) or name.startswith("SQLITE_FULL") or "disk is full" in msg:
        return "full"
    if code in (_errno.EROFS, _errno.EACCES, _errno.EPERM) or name.startswith(
            ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")) or "readonly" in msg \
            or "unable to open" in msg:
        return "readonly"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "is locked" in msg:
        return "busy"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in msg or "not a database" in msg:
        return "damaged"
    if name.startswith("SQLITE_IOERR") or "i/o error" in msg or isinstance(e, OSError):
        try:  # a write that failed for want of space often surfaces as an I/O error
            if path is not None and shutil.disk_usage(Path(path).parent).free < (1 << 20):
                return "full"
        except OSError:
            pass
        return "io"
    return "other"


def cache_error(path: Path | None, what: str, e: BaseException) -> TrajectoryCacheError:
    """The one-line error of a failed cache operation: the cause, and the fix that fits it — only a damaged file is
    worth deleting; a full disk, a read-only or locked file leaves every committed record intact."""
    kind = sqlite_failure(e, path)
    where = f"trajectory cache {path}: cannot {what}"
    if kind == "path":
        from envs.core.io import describe_os_error

        return _kind(TrajectoryCacheError(f"{where}: {describe_os_error(e)}; point cache_path at a file in a "
                                          "writable folder"), kind)
    fix = {
        "folder": "it is a folder, not a file — point cache_path at a file (e.g. <folder>/cache.sqlite)",
        "full": "the disk is full (no space left on the device); every record written before is intact — free some "
                "space and rerun (keep the cache: it is not damaged)",
        "readonly": "the file or its folder is read-only or not writable (permission, read-only file system); the "
                    "cache is intact — make it writable or point cache_path at a writable folder",
        "busy": "the file is locked by another process (a network file system without locks, or a stuck writer); "
                "the cache is intact — stop that process, or use the cache service (cache_service: true)",
        "io": "an input/output error (a failing disk or a lost network mount); the committed records are unchanged — "
              "check the disk and rerun",
        "damaged": "the file is damaged (not a SQLite database, or corrupted) — delete it (records are regenerated) "
                   "or restore it from a copy",
        "other": "rerun; if it persists, check the file and its folder",
    }[kind]
    return _kind(TrajectoryCacheError(f"{where} ({e}); {fix}"), kind)


def _kind(err: TrajectoryCacheError, kind: str) -> TrajectoryCacheError:
    err.kind = kind
    return err


def open_store(path: Path, wait_s: float = 30.0) -> sqlite3.Connection:
    """The SQLite store of a trajectory cache (WAL, autocommit, the ``steps`` table), or a
    :class:`TrajectoryCacheError` naming the file and the cause (damaged, full disk, read-only …).

    Processes that open a new file at once (a warm start's shards, a benchmark's helpers) race to switch it to WAL;
    SQLite answers the loser "database is locked" at once, without waiting (its deadlock rule). So a locked file is
    opened again until ``wait_s`` has passed — only a lock held that long is the error."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        db = None
        try:
            db = sqlite3.connect(str(path), timeout=wait_s, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS steps (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            return db
        except sqlite3.DatabaseError as e:
            if db is not None:
                db.close()
            err = cache_error(path, "open it", e)
            if err.kind == "busy" and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            if err.kind == "damaged":
                err = TrajectoryCacheError(f"trajectory cache {path} is not a usable SQLite file ({e}); delete it "
                                           "to start a fresh cache")
            raise err from e


class TrajectoryCache:
    """Key-value store of step records keyed by ``(namespace, question id, action prefix)``.

    Args:
        path: SQLite file (created with its folder); ``None`` keeps the cache in memory only.
        namespace: what the outcomes depend on (see :func:`namespace_of`); different namespaces never mix.
        lru_size: records kept in memory.
    """

    def __init__(self, path: str | Path | None, namespace: str, lru_size: int = 100_000):
        self.path = Path(path) if path is not None else None
        self.namespace = namespace
        self.lru: OrderedDict[str, Any] = OrderedDict()
        self.lru_size = lru_size
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise cache_error(self.path, "create its folder", e) from e
            self._connect()

    def _connect(self) -> None:
        self._db = open_store(self.path)

    def __getstate__(self) -> dict[str, Any]:  # picklable for Ray: reconnect on the other side
        d = self.__dict__.copy()
        d["_db"], d["_lock"], d["lru"] = None, None, OrderedDict()
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()
        if self.path is not None:
            self._connect()

    def _key(self, qid: str, prefix: tuple) -> str:
        return f"{self.namespace}|{qid}|{','.join(map(str, prefix))}"

    def get(self, qid: str, prefix: tuple) -> Any | None:
        """The record stored for ``(qid, prefix)``, or ``None``."""
        k = self._key(qid, prefix)
        with self._lock:
            if k in self.lru:
                self.lru.move_to_end(k)
                self.hits += 1
                return self.lru[k]
            row = None
            if self._db is not None:
                try:
                    row = self._db.execute("SELECT value FROM steps WHERE key = ?", (k,)).fetchone()
                except sqlite3.DatabaseError as e:
                    raise self._error("read", e) from e
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
            try:
                value = decode(row[0])
            except RecordFormatError as e:
                raise TrajectoryCacheError(f"trajectory cache {self.path}: record {k!r}: {e}") from e
            self._remember(k, value)
            return value

    def put(self, qid: str, prefix: tuple, value: Any) -> None:
        """Store a record (committed immediately)."""
        k = self._key(qid, prefix)
        with self._lock:
            self._remember(k, value)
            if self._db is not None:
                try:
                    self._db.execute("INSERT OR REPLACE INTO steps (key, value) VALUES (?, ?)", (k, encode(value)))
                except sqlite3.DatabaseError as e:
                    raise self._error("write", e) from e

    def get_many(self, items: list[tuple[str, tuple]]) -> list[Any | None]:
        """:meth:`get` of every ``(qid, prefix)`` (a shared cache serves them in one round trip)."""
        return [self.get(q, p) for q, p in items]

    def put_many(self, items: list[tuple[str, tuple, Any]]) -> None:
        """:meth:`put` of every ``(qid, prefix, record)``."""
        for q, p, v in items:
            self.put(q, p, v)

    def _error(self, what: str, e: Exception) -> TrajectoryCacheError:
        return cache_error(self.path, what, e)

    def _remember(self, k: str, value: Any) -> None:
        self.lru[k] = value
        if len(self.lru) > self.lru_size:
            self.lru.popitem(last=False)

    def __len__(self) -> int:
        if self._db is None:
            return len(self.lru)
        return self._db.execute("SELECT COUNT(*) FROM steps WHERE key LIKE ?", (f"{self.namespace}|%",)).fetchone()[0]

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
