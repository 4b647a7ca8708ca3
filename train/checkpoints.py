"""A run's checkpoints and metrics file: atomic saves (``save_to_path`` into a temp dir, then ``rename``), the
newest loadable one restored on resume, and ``metrics.jsonl`` trimmed to the restored iteration."""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from envs.core.io import make_dir, writing

log = logging.getLogger(__name__)

CKPT_PREFIX = "iter_"
TMP_PREFIX = ".tmp-"
#: this process's mark on its checkpoint temp folders (a save removes its own, never another run's)
RUN_TOKEN = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (temp dirs of an interrupted save are ignored)."""
    if not ckpt_dir.is_dir():
        return []
    done = [p for p in ckpt_dir.iterdir() if p.is_dir() and p.name.startswith(CKPT_PREFIX)
            and p.name[len(CKPT_PREFIX):].isdigit()]
    return sorted(done, key=lambda p: int(p.name[len(CKPT_PREFIX):]))


def save_checkpoint(algo, ckpt_dir: Path, keep: int) -> Path:
    """``algo.save_to_path`` into ``ckpt_dir/.tmp-…-<this run's token>`` then ``rename`` to ``iter_NNNNNN``
    (atomic). Only this run's temp folder is ever removed here (another run's are not ours to delete: the folder
    lock keeps a second run out, :func:`remove_stale_temps` clears a dead run's under it). An OS error (a full
    disk, a read-only folder) is one line naming the checkpoint and the cause; the older checkpoints are kept."""
    make_dir(ckpt_dir)
    final = ckpt_dir / f"{CKPT_PREFIX}{algo.iteration:06d}"
    tmp = ckpt_dir / f"{TMP_PREFIX}{final.name}-{RUN_TOKEN}"
    try:
        with writing(final, "write the checkpoint"):
            shutil.rmtree(tmp, ignore_errors=True)
            algo.save_to_path(str(tmp.resolve()))
            (tmp / "kairos_iteration.json").write_text(json.dumps({"iteration": algo.iteration}))
            _fsync_tree(tmp)  # the files are on disk before the rename publishes them
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(ckpt_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written save frees its space
        raise
    for old in list_checkpoints(ckpt_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def remove_stale_temps(ckpt_dir: Path) -> list[str]:
    """Remove the temp folders of interrupted saves — only call it holding the run folder's lock (then no other
    live run writes there). Returns their names (logged)."""
    if not ckpt_dir.is_dir():
        return []
    stale = sorted(p.name for p in ckpt_dir.glob(f"{TMP_PREFIX}*"))
    for name in stale:
        shutil.rmtree(ckpt_dir / name, ignore_errors=True)
    if stale:
        log.info("%s: removed %d temp folder(s) of an interrupted save: %s", ckpt_dir, len(stale), ", ".join(stale))
    return stale


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(dirpath))


def restore_newest(algo, ckpts: list[Path]) -> Path:
    """Restore the newest checkpoint that loads; a damaged one (e.g. truncated by a crash mid-write outside our
    atomic rename) is skipped with a warning naming it, falling back to the one before. No loadable one: error."""
    errors, mismatch = [], []
    for ck in reversed(ckpts):
        try:
            algo.restore_from_path(str(ck.resolve()))
            if errors:
                log.warning("resume: skipped damaged checkpoint(s) %s", "; ".join(errors))
            return ck
        except Exception as e:  # noqa: BLE001 - any failure to load means "damaged": try the previous one
            errors.append(f"{ck.name}: {type(e).__name__}: {str(e)[:200]}")
            if "size mismatch" in str(e) or "Missing key" in str(e) or "Unexpected key" in str(e):
                mismatch.append(ck.name)
    if mismatch and len(mismatch) == len(ckpts):
        from envs.core.config import ConfigError

        raise ConfigError(f"resume: the checkpoints in {ckpts[0].parent} hold another model than this config builds "
                          f"(parameter names or sizes differ: the model config changed since they were saved); "
                          "restore the model settings the run was started with, or start a new run in another "
                          "out_dir")
    raise RuntimeError(f"resume: no checkpoint in {ckpts[0].parent} could be restored ({'; '.join(errors)}); "
                       "delete the directory to start over")


def read_metrics(path: Path, warn: bool = True) -> list[dict[str, Any]]:
    """The complete rows of ``metrics.jsonl``; a torn line (a crash while writing it, or text that is no row) is
    left out with a warning naming the file and the line."""
    if not path.is_file():
        return []
    rows = []
    for i, ln in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not ln.strip():
            continue
        try:
            row = json.loads(ln)
            if not isinstance(row, dict) or not isinstance(row.get("iteration"), int):
                raise ValueError
        except ValueError:
            if warn:
                log.warning("%s:%d: dropping a torn metrics line (a crash while writing it?): %.80r", path, i, ln)
            continue
        rows.append(row)
    return rows


def trim_metrics(path: Path, upto: int) -> int:
    """Keep only the rows of iterations ``<= upto`` (a resumed run re-runs the later ones: no duplicates), torn
    lines dropped with a warning; returns how many rows were dropped (the file is rewritten only then)."""
    if not path.is_file():
        return 0
    from envs.core.io import write_text

    n_lines = sum(1 for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip())
    keep = [r for r in read_metrics(path) if r["iteration"] <= upto]
    if len(keep) != n_lines:
        write_text(path, "".join(json.dumps(r) + "\n" for r in keep))
    return n_lines - len(keep)


def last_metrics(path: Path) -> dict[str, float]:
    """The last complete row of ``metrics.jsonl`` without its bookkeeping keys ({} when there is none)."""
    rows = read_metrics(path, warn=False)
    return {k: v for k, v in rows[-1].items() if k not in ("iteration", "time")} if rows else {}
