"""Formatting and reading a benchmark summary, shared by its report (:mod:`eval.bench.report`) and plots
(:mod:`eval.bench.plots`): numbers as the report prints them (missing, None or NaN → "–") and the summary's
methods, operating points, curves and frontier."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

DASH = "–"



def _num(x: Any) -> float | None:
    """``x`` as a finite float, or None for None / NaN / inf / non-numbers (bools included)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _fmt(x: Any, nd: int = 3, signed: bool = False) -> str:
    v = _num(x)
    if v is None:
        return DASH
    return f"{v:+.{nd}f}" if signed else f"{v:.{nd}f}"


def _fmt_big(x: Any) -> str:
    """Token counts and the like: no decimals above 100, three significant digits below."""
    v = _num(x)
    if v is None:
        return DASH
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _fmt_int(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else f"{v:.0f}"


def _fmt_p(p: Any) -> str:
    """p-values: ``0.043``, ``0.0012``, ``<1e-4``."""
    v = _num(p)
    if v is None:
        return DASH
    if v < 1e-4:
        return "<1e-4"
    return f"{v:.3f}" if v >= 0.01 else f"{v:.4f}"


def _fmt_ci(acc: Any, lo: Any, hi: Any, nd: int = 3, signed: bool = False) -> str:
    main = _fmt(acc, nd, signed)
    if _num(lo) is None and _num(hi) is None:
        return main
    return f"{main} [{_fmt(lo, nd, signed)}, {_fmt(hi, nd, signed)}]"


def _fmt_value(v: Any) -> str:
    """A free-form setup value."""
    if v is None:
        return DASH
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return DASH if not math.isfinite(v) else f"{v:g}"
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=str)
    return str(v)


def _fmt_reject(r: Any) -> str:
    if r is None:
        return DASH
    return "✓" if bool(r) else ""


# ------------------------------------------------------------------------------------------------ data


def _methods(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    methods = summary.get("methods") or {}
    return {str(k): (dict(v) if isinstance(v, Mapping) else {}) for k, v in methods.items()}


def _point(m: Mapping[str, Any]) -> tuple[float, float] | None:
    """(calls, accuracy) of a method's chosen operating point, if both are finite."""
    c, a = _num(m.get("calls")), _num(m.get("accuracy"))
    return None if c is None or a is None else (c, a)


def _curve(m: Mapping[str, Any]) -> list[tuple[float, float]]:
    """Finite (calls, accuracy) points of a method's threshold sweep, sorted by calls."""
    pts = []
    for row in m.get("curve") or []:
        if isinstance(row, Mapping):
            c, a = _num(row.get("calls")), _num(row.get("accuracy"))
            if c is not None and a is not None:
                pts.append((c, a))
    return sorted(pts)


def _pareto(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names of the non-dominated points (fewer calls, higher accuracy), by increasing calls."""
    out, best = [], -math.inf
    for name, (_, a) in sorted(points.items(), key=lambda kv: (kv[1][0], -kv[1][1])):
        if a > best:
            out.append(name)
            best = a
    return out


def _frontier(summary: Mapping[str, Any]) -> list[str]:
    """The summary's frontier (or one computed from the chosen points when it has none)."""
    fr = summary.get("frontier")
    if isinstance(fr, Sequence) and not isinstance(fr, str):
        return [str(x) for x in fr]
    pts = {n: p for n, m in _methods(summary).items() if (p := _point(m)) is not None}
    return _pareto(pts)


def _label(name: str, m: Mapping[str, Any]) -> str:
    lam = _num(m.get("lambda"))
    show = m.get("kind") == "learned" and lam is not None and "λ" not in name
    return f"{name} (λ={lam:g})" if show else name


# ------------------------------------------------------------------------------------------------ plots

def metric_label(name: str) -> str:
    """How a report names an answer metric (``setup.quality_metric`` / ``setup.metrics`` of a summary)."""
    from envs.qa_task import METRIC_LABELS

    return METRIC_LABELS.get(name, name)


def quality_label(summary: Mapping[str, Any]) -> str:
    """The name of what the summary's ``accuracy`` holds (the task's quality metric; ``accuracy`` when unstated)."""
    return metric_label((summary.get("setup") or {}).get("quality_metric") or "acc")
