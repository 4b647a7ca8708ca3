"""The benchmark's figures: accuracy vs retrieval calls per question (one point per method, threshold sweeps as
curves, the frontier) and accuracy per method with its bootstrap CI — PNGs for :mod:`eval.bench.report`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envs.core.io import atomic_open
from eval.bench.format import DASH, _curve, _frontier, _label, _methods, _num, _point, quality_label

__all__ = ["KIND_MARKERS", "KIND_SIZES", "plot_accuracy_ci", "plot_pareto"]

KIND_MARKERS = {"baseline": "o", "fixed": "o", "learned": "*", "random": "x", "oracle": "D"}
KIND_SIZES = {"baseline": 80, "fixed": 80, "learned": 260, "random": 90, "oracle": 80}



def _save(fig: Any, out_png: Path, dpi: int = 130) -> Path:
    """Write ``fig`` as PNG through a temp file in the same directory and an atomic rename."""
    import matplotlib.pyplot as plt

    out_png = Path(out_png)
    try:
        with atomic_open(out_png, "wb") as f:
            fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return out_png


def plot_pareto(summary: Mapping[str, Any], out_png: str | Path) -> Path:
    """Accuracy vs retrieval calls per question, one point per method plus threshold sweeps.

    Fixed triggers draw their test-split threshold sweep as a thin line with small markers in the
    colour of their chosen point; learned policies are stars (labelled with their λ), random policies
    crosses, oracles diamonds; the Pareto frontier over the chosen points is a dashed black step line
    and the reference method's accuracy a dotted grey horizontal line.

    Args:
        summary: The benchmark summary (see the module docstring).
        out_png: Where to write the PNG (parent directories are created).

    Returns:
        ``out_png`` as a Path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = _methods(summary)
    colors = plt.get_cmap("tab20").colors
    fig, ax = plt.subplots(figsize=(8.2, 5.2))
    points: dict[str, tuple[float, float]] = {}
    for i, (name, m) in enumerate(methods.items()):
        color = colors[i % len(colors)]
        kind = str(m.get("kind") or "baseline")
        curve = _curve(m)
        if curve:
            ax.plot([c for c, _ in curve], [a for _, a in curve], color=color, lw=1.0, alpha=0.65,
                    marker=".", ms=4, zorder=2)
        p = _point(m)
        if p is None:
            continue
        points[name] = p
        marker = KIND_MARKERS.get(kind, "o")
        edge = {"edgecolors": "black", "linewidths": 0.6} if marker != "x" else {"linewidths": 2.0}
        ax.scatter([p[0]], [p[1]], s=KIND_SIZES.get(kind, 80), marker=marker, color=color, zorder=4,
                   label=_label(name, m), **edge)
        ax.annotate(_label(name, m), p, xytext=(5, 5), textcoords="offset points", fontsize=7.5, zorder=5)

    front = [n for n in _frontier(summary) if n in points]
    front.sort(key=lambda n: points[n])
    if front:
        ax.step([points[n][0] for n in front], [points[n][1] for n in front], where="post", color="black",
                ls="--", lw=1.2, zorder=3, label="Pareto frontier")
    ref = summary.get("reference")
    if ref in points:
        ax.axhline(points[ref][1], color="0.6", ls=":", lw=0.9, zorder=1)
    if not points:
        ax.text(0.5, 0.5, "no methods with accuracy and calls", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
    ax.set_xlabel("retrieval calls per question")
    ax.set_ylabel(quality_label(summary))
    ax.set_title(str(summary.get("title") or "Accuracy vs retrieval calls"), fontsize=10)
    ax.grid(alpha=0.3)
    if points:
        ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                  markerscale=0.7, borderaxespad=0.0)
    fig.tight_layout()
    return _save(fig, Path(out_png))


def plot_accuracy_ci(summary: Mapping[str, Any], out_png: str | Path) -> Path:
    """Horizontal bars of accuracy per method with 95% CI error bars, best method on top.

    The retrieval calls per question are written at the end of each bar.

    Args:
        summary: The benchmark summary (see the module docstring).
        out_png: Where to write the PNG (parent directories are created).

    Returns:
        ``out_png`` as a Path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = _methods(summary)
    colors = plt.get_cmap("tab20").colors
    color_of = {n: colors[i % len(colors)] for i, n in enumerate(methods)}
    rows = [(n, m, a) for n, m in methods.items() if (a := _num(m.get("accuracy"))) is not None]
    rows.sort(key=lambda r: r[2])  # barh draws bottom-up: the best method ends on top
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * max(len(rows), 2) + 1.3))
    if not rows:
        ax.text(0.5, 0.5, "no methods with an accuracy", ha="center", va="center", transform=ax.transAxes,
                color="0.4")
        ax.set_yticks([])
    else:
        ys = list(range(len(rows)))
        accs = [a for _, _, a in rows]
        lo_err = [max(a - lo, 0.0) if (lo := _num(m.get("acc_lo"))) is not None else 0.0 for _, m, a in rows]
        hi_err = [max(hi - a, 0.0) if (hi := _num(m.get("acc_hi"))) is not None else 0.0 for _, m, a in rows]
        ax.barh(ys, accs, xerr=[lo_err, hi_err], color=[color_of[n] for n, _, _ in rows], alpha=0.85,
                error_kw={"ecolor": "black", "capsize": 3, "lw": 1.0})
        right = max(a + e for a, e in zip(accs, hi_err))
        for y, (_, m, a), e in zip(ys, rows, hi_err):
            calls = _num(m.get("calls"))
            txt = f"{calls:.2f} calls/q" if calls is not None else f"{DASH} calls/q"
            ax.text(a + e + 0.01 * max(right, 1e-9), y, txt, va="center", fontsize=7.5)
        ax.set_yticks(ys, [_label(n, m) for n, m, _ in rows], fontsize=8)
        ax.set_xlim(0, max(right * 1.22, 0.05))
    ax.set_xlabel(f"{quality_label(summary)} (95% bootstrap CI)")
    ax.set_title(str(summary.get("title") or "Accuracy per method"), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _save(fig, Path(out_png))


# ------------------------------------------------------------------------------------------------ content
#
# Markdown and HTML are rendered from one list of blocks so that both carry the same content:
# ("h", level, text) | ("p", text) | ("ul", [text]) | ("table", headers, rows, numeric_cols) | ("img", key)
