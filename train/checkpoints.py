"""A run's checkpoints and metrics file: atomic saves (``save_to_path`` into a temp dir, then ``rename``), the
newest loadable one restored on resume, and ``metrics.jsonl`` trimmed to the restored iteration."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

CKPT_PREFIX = "iter_"


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (temp dirs of an interrupted save are ignored)."""
    if not ckpt_dir.is_dir():
        return []
    done = [p for p in ckpt_dir.iterdir() if p.is_dir() and p.name.startswith(CKPT_PREFIX)
            and p.name[len(CKPT_PREFIX):].isdigit()]
    return sorted(done, key=lambda p: int(p.name[len(CKPT_PREFIX):]))


def save_checkpoint(algo, ckpt_dir: Path, keep: int) -> Path:
    """``algo.save_to_path`` into ``ckpt_dir/.tmp-…`` then ``rename`` to ``iter_NNNNNN`` (atomic)."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"{CKPT_PREFIX}{algo.iteration:06d}"
    tmp = ckpt_dir / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    algo.save_to_path(str(tmp.resolve()))
    (tmp / "kairos_iteration.json").write_text(json.dumps({"iteration": algo.iteration}))
    _fsync_tree(tmp)  # the files are on disk before the rename publishes them
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckpt_dir)
    for old in list_checkpoints(ckpt_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in ckpt_dir.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


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
    errors = []
    for ck in reversed(ckpts):
        try:
            algo.restore_from_path(str(ck.resolve()))
            if errors:
                log.warning("resume: skipped damaged checkpoint(s) %s", "; ".join(errors))
            return ck
        except Exception as e:  # noqa: BLE001 - any failure to load means "damaged": try the previous one
            errors.append(f"{ck.name}: {type(e).__name__}: {str(e)[:200]}")
    raise RuntimeError(f"resume: no checkpoint in {ckpts[0].parent} could be restored ({'; '.join(errors)}); "
                       "delete the directory to start over")


def trim_metrics(path: Path, upto: int) -> None:
    """Keep only the rows of iterations ``<= upto`` (a resumed run re-runs the later ones: no duplicates)."""
    if not path.is_file():
        return
    from envs.core.io import write_text

    rows = [ln for ln in path.read_text().splitlines() if ln.strip()]
    keep = []
    for ln in rows:
        try:
            if int(json.loads(ln)["iteration"]) <= upto:
                keep.append(ln)
        except (ValueError, KeyError):
            continue  # a torn last line
    if len(keep) != len(rows):
        write_text(path, "".join(x + "\n" for x in keep))


def last_metrics(path: Path) -> dict[str, float]:
    """The last complete row of ``metrics.jsonl`` without its bookkeeping keys ({} when there is none)."""
    if not path.is_file():
        return {}
    for ln in reversed(path.read_text().splitlines()):
        try:
            row = json.loads(ln)
        except ValueError:
            continue
        return {k: v for k, v in row.items() if k not in ("iteration", "time")}
    return {}
