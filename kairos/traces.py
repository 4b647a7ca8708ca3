"""The benchmark's per-question trace files, for the inspector page (``kairos serve --traces DIR``).

``kairos bench policies`` appends one JSON line per question to ``<out_dir>/per_question/<split>/<method>.jsonl``
(:func:`train.evaluate._row`: the question, its decisions — action, step, signals, query, passage ids, the
regenerated step —, the answer, calls, costs). :func:`list_trace_files` finds them under a directory (one
benchmark's output, or a folder above several) and names each by its method — from the benchmark's
``summary.json`` — with the policy's operating point (a calibrated threshold trigger's signal, direction and
threshold: the page draws the signal against it). :func:`read_trace_file` returns a file's rows.

Files are addressed by their path relative to the directory; nothing outside it is read.

Example:
    >>> list_trace_files("/nonexistent")
    []
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: rows a page asks for at most in one request
MAX_ROWS = 2000


@dataclass
class TraceFile:
    """A per-question trace file: its id (path relative to the traces directory), benchmark directory, split,
    method, policy operating point (``kind``, ``signal``, ``direction``, ``threshold``; what is known) and size."""

    id: str
    bench: str
    split: str
    method: str
    policy: dict[str, Any]
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bench_meta(bench: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """``(file path -> method, method -> operating point)`` of a benchmark directory (empty when it records none)."""
    by_file: dict[str, str] = {}
    points: dict[str, dict[str, Any]] = {}
    try:
        summary = json.loads((bench / "summary.json").read_text())
    except (OSError, ValueError):
        return by_file, points
    for name, res in (summary.get("methods") or {}).items():
        if isinstance(res, dict) and res.get("per_question"):
            by_file[Path(res["per_question"]).name] = name
    specs = {}
    try:
        cfg = json.loads((bench / "config.json").read_text())
        specs = {m.get("name"): m for m in cfg.get("methods", []) if isinstance(m, dict)}
    except (OSError, ValueError):
        pass
    for name, calib in (summary.get("calibration") or {}).items():
        spec = specs.get(name, {})
        point = {"kind": spec.get("kind")}
        if spec.get("kind") == "threshold":
            point.update(signal=spec.get("signal"), direction=spec.get("direction", "below"))
        chosen = calib.get("chosen") if isinstance(calib, dict) else None
        if isinstance(chosen, (int, float)):
            point["threshold"] = float(chosen)
        points[name] = point
    for name, spec in specs.items():
        if name not in points and spec.get("kind") == "threshold" and spec.get("fixed_threshold") is not None:
            points[name] = {"kind": "threshold", "signal": spec.get("signal"),
                            "direction": spec.get("direction", "below"), "threshold": spec["fixed_threshold"]}
        points.setdefault(name, {"kind": spec.get("kind")})
    return by_file, points


def list_trace_files(root: str | Path) -> list[TraceFile]:
    """Every ``per_question/<split>/<method>.jsonl`` under ``root``, the test split first, then by path."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    metas: dict[Path, tuple[dict[str, str], dict[str, dict[str, Any]]]] = {}
    for f in sorted(root.rglob("per_question/*/*.jsonl")):
        bench = f.parent.parent.parent
        if bench not in metas:
            metas[bench] = _bench_meta(bench)
        by_file, points = metas[bench]
        method = by_file.get(f.name, f.stem) if f.parent.name == "test" else f.stem
        out.append(TraceFile(id=f.relative_to(root).as_posix(), bench=bench.relative_to(root).as_posix() or ".",
                             split=f.parent.name, method=method, policy=points.get(method, {}),
                             bytes=f.stat().st_size))
    out.sort(key=lambda t: (t.split != "test", t.id))
    return out


def read_trace_file(root: str | Path, file_id: str, offset: int = 0, limit: int = MAX_ROWS) -> dict[str, Any]:
    """The rows of one listed file (``offset``/``limit`` page through a long one), with its description.

    Raises:
        FileNotFoundError: no such file among :func:`list_trace_files` (naming what is listed).
        ValueError: a line that is not JSON (naming the file and line).
    """
    root = Path(root)
    files = {t.id: t for t in list_trace_files(root)}
    if file_id not in files:
        raise FileNotFoundError(f"no trace file '{file_id}' under the traces directory ({len(files)} listed: "
                                "GET /v1/kairos/traces)")
    path = root / file_id
    rows, total = [], 0
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            total += 1
            if offset < total <= offset + limit:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{file_id}:{n}: not JSON ({e})") from None
    return {**files[file_id].to_dict(), "offset": offset, "total": total, "rows": rows}


__all__ = ["MAX_ROWS", "TraceFile", "list_trace_files", "read_trace_file"]
