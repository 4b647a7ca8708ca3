"""One run per output folder: the lock every command that writes a run's folder takes first (``kairos train`` /
``python -m train``, ``kairos bench …``, ``kairos quickstart``, ``kairos index build``, ``kairos retriever
train-colbert``, ``kairos microworld build``, ``kairos train querygen``).

The lock is an ``flock`` on ``<folder>/.kairos-lock``, a small JSON file naming its holder (pid, host, command,
start time). The kernel releases an ``flock`` when its process dies, however it dies (``kill -9``, a container
stopped): a lock is never left held by a dead process, and two processes with the same pid (two containers sharing
a volume) still exclude each other — the lock belongs to an open file, not to a pid. A second run on the folder
refuses at once with a :class:`FolderBusyError` naming the holder. The file's content outlives a crash: the next
run finds the holder it names gone, takes the lock over and logs a note saying so.

Example (another process trying the folder meanwhile gets ``FolderBusyError: <d> is in use by another run (pid …
on host …, started …: demo); wait for it to finish, stop it, or use another output folder``):
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with FolderLock(d, "demo"):
    ...     held(d)
    True
    >>> held(d)
    False
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from envs.core.io import make_dir, output_error

log = logging.getLogger(__name__)

LOCK_NAME = ".kairos-lock"


class FolderBusyError(ValueError):
    """Another running process holds the output folder's lock (the message names it and the fix)."""


def _command() -> str:
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)  # `python -m train …` as typed, not __main__.py
    if argv:
        argv[0] = Path(argv[0]).name or "python"
    text = " ".join(argv)
    return text if len(text) <= 200 else text[:197] + "..."


def _holder_text(h: dict[str, Any]) -> str:
    started = h.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"pid {h.get('pid', '?')} on host {h.get('host', '?')}, started {when}: {h.get('command', '?')!s}"


class FolderLock:
    """The lock of one output folder (created if missing). A context manager; re-entrant in one process (a nested
    ``acquire`` of a folder this process holds is a no-op), so a command may lock a folder a caller locked already.

    Args:
        folder: the output folder.
        command: what the holder is, for the message a second run shows (default: this process's command line).
        lock_name: the lock file's name in ``folder`` (:func:`output_lock` locks one output *file* with
            ``<file>.lock``, so runs writing other files of the folder are not excluded).
        target: what the lock guards, for the messages (default: the folder).
    """

    _held: dict[str, FolderLock] = {}  # lock file (resolved) -> the lock this process holds on it

    def __init__(self, folder: str | Path, command: str | None = None, lock_name: str = LOCK_NAME,
                 target: str | Path | None = None):
        self.folder = Path(folder)
        self.command = command or _command()
        self.lock_name = lock_name
        self.target = Path(target) if target is not None else self.folder
        self._fd: int | None = None
        self._key: str | None = None
        self._nested = False

    @property
    def path(self) -> Path:
        return self.folder / self.lock_name

    def acquire(self) -> FolderLock:
        make_dir(self.folder)
        key = str(self.path.resolve())
        if key in FolderLock._held:  # this process holds it already (e.g. quickstart → train on one folder)
            self._nested = True
            return self
        for _ in range(20):  # retried only when a releasing holder unlinked the file between open and flock
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise output_error(e, self.path, "create the lock file") from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise FolderBusyError(
                    f"{self.target} is in use by another run ({_holder_text(holder) if holder else 'holder unknown'}); "
                    f"wait for it to finish, stop it, or use another output {'folder' if self.target == self.folder else 'file'}"
                ) from None
            except OSError as e:  # a file system without locks
                os.close(fd)
                raise output_error(e, self.path, "lock") from e
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the previous holder removed the file as we opened it: lock the new one
                os.close(fd)
                continue
            break
        else:  # pragma: no cover - a pathological churn of holders
            raise FolderBusyError(f"{self.target}: could not take the lock {self.path} (it keeps changing)")
        old = _read(fd)
        if old:  # the file names a holder, and we got the lock: that holder is gone without releasing it
            log.warning("%s: taking over the lock left by a run that is no longer running (%s)", self.target,
                        _holder_text(old))
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command, "started": time.time()}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
            os.fsync(fd)
        except OSError as e:
            os.close(fd)
            raise output_error(e, self.path) from e
        self._fd = fd
        self._key = key  # kept: a relative folder resolves elsewhere once the working directory changes
        FolderLock._held[key] = self
        return self

    def release(self) -> None:
        if self._nested:
            self._nested = False
            return
        if self._fd is None:
            return
        FolderLock._held.pop(self._key or str(self.path.resolve()), None)
        with contextlib.suppress(OSError):  # unlinked while still locked: a waiting opener sees another inode
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read(fd: int) -> dict[str, Any] | None:
    """The holder a lock file names (``None``: empty or unreadable)."""
    try:
        raw = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        data = json.loads(raw) if raw else None
    except (OSError, ValueError):
        return {"command": "(unreadable lock file)"}
    return data if isinstance(data, dict) else None


def held(folder: str | Path) -> bool:
    """Whether this process holds ``folder``'s lock."""
    return str((Path(folder) / LOCK_NAME).resolve()) in FolderLock._held


def output_lock(path: str | Path, command: str | None = None) -> FolderLock:
    """The lock of one output *file* (``<path>.lock`` beside it): one run per file, while other runs write other
    files of the same folder (e.g. two ``eval.detection.labels`` runs into ``runs/labels/``). Same guarantees and
    messages as :class:`FolderLock`, naming the file."""
    path = Path(path)
    return FolderLock(path.parent, command, lock_name=f"{path.name}.lock", target=path)
