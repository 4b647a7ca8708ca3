"""Render a precomputed retrieval-policy benchmark summary as plots, Markdown and self-contained HTML.

The benchmark compares *retrieval policies* (when a step-by-step reasoner should call its retriever)
on accuracy against retrieval calls per question. Everything statistical (bootstrap CIs, McNemar,
Holm correction, Pareto frontier, matched-budget interpolation) is computed upstream; this module only
draws and formats a ``summary`` dict of this shape::

    {
      "title": "Kairos benchmark: micro-world dev[100:400]",
      "setup": {"dataset": ..., "n": 300, "lambda": 0.1, ...},          # free-form key -> value
      "reference": "CoT",
      "methods": {"<name>": {"kind": "baseline" | "fixed" | "learned" | "random" | "oracle",
                             "accuracy", "acc_lo", "acc_hi", "calls", "tokens", "seconds", "reward",
                             "gain_per_call", "gold_injected_share", "recall_at_k", "n", "threshold", "curve", "lambda"}},
      "comparisons": [{"method", "reference", "diff", "lo", "hi", "p_bootstrap", "b", "c",
                       "p_mcnemar", "p_holm", "reject"}],
      "matched_budget": [{"budget", "method", "accuracy"}],
      "dominance": ["A dominates B at every budget in ...", ...],
      "frontier": ["CoT", "FLARE", ...],
      "breakdowns": {"by hops": {"<group>": {"<method>": {"accuracy", "calls", "n"}}}},
      "notes": ["..."],
    }

Any field may be missing, ``None`` or NaN; such values render as "–" and are left out of the plots.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envs.core.io import atomic_open, write_json

log = logging.getLogger(__name__)

__all__ = ["markdown_table", "plot_pareto", "plot_accuracy_ci", "render_markdown", "render_html",
           "write_report"]

DASH = "–"
KIND_MARKERS = {"baseline": "o", "fixed": "o", "learned": "*", "random": "x", "oracle": "D"}
KIND_SIZES = {"baseline": 80, "fixed": 80, "learned": 260, "random": 90, "oracle": 80}
PLOT_CAPTIONS = {"pareto": "Accuracy vs retrieval calls per question",
                 "accuracy": "Accuracy per method with 95% bootstrap CI"}

# ------------------------------------------------------------------------------------------------ numbers


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


def metric_label(name: str) -> str:
    """How a report names an answer metric (``setup.quality_metric`` / ``setup.metrics`` of a summary)."""
    from envs.qa_task import METRIC_LABELS

    return METRIC_LABELS.get(name, name)


def quality_label(summary: Mapping[str, Any]) -> str:
    """The name of what the summary's ``accuracy`` holds (the task's quality metric; ``accuracy`` when unstated)."""
    return metric_label((summary.get("setup") or {}).get("quality_metric") or "acc")


def _blocks(summary: Mapping[str, Any], plot_keys: Sequence[str]) -> list[tuple[Any, ...]]:
    methods = _methods(summary)
    ref = summary.get("reference")
    out: list[tuple[Any, ...]] = []

    setup = summary.get("setup") or {}
    if setup:
        out.append(("h", 2, "Setup"))
        out.append(("table", ["setting", "value"], [[str(k), _fmt_value(v)] for k, v in setup.items()], set()))

    out.append(("h", 2, "Results"))
    if methods:
        has_lam = any(_num(m.get("lambda")) is not None for m in methods.values())
        qname = quality_label(summary)
        # the task's other answer metrics (e.g. EM beside F1, strict beside lenient accuracy) as columns of their own
        extra = [k for k in (setup.get("metrics") or []) if k != setup.get("quality_metric")]
        closing = any(m.get("no_answer_share") is not None for m in methods.values())
        headers = (["method", "kind", f"{qname} [95% CI]"] + [metric_label(k) for k in extra]
                   + ["calls/q", "tokens", "seconds", "reward", "harm rate", "gain/call", "evidence recall", "R@k"]
                   + (["no answer", "closed"] if closing else []) + ["threshold · query mode"]
                   + (["λ"] if has_lam else []) + ["n"])
        rows = []
        for name, m in methods.items():
            thr = _fmt(m.get("threshold"), 3)
            if m.get("query_mode"):
                thr = f"{thr} · {m['query_mode']}" if thr != DASH else str(m["query_mode"])
            row = ([name, str(m.get("kind") or DASH), _fmt_ci(m.get("accuracy"), m.get("acc_lo"), m.get("acc_hi"))]
                   + [_fmt((m.get("metrics") or {}).get(k), 3) for k in extra]
                   + [_fmt(m.get("calls"), 2), _fmt_big(m.get("tokens")), _fmt(m.get("seconds"), 2),
                      _fmt(m.get("reward"), 3), _fmt(m.get("harm_rate"), 3), _fmt(m.get("gain_per_call"), 3),
                      _fmt(m.get("gold_injected_share"), 3), _fmt(m.get("recall_at_k"), 3)]
                   + ([_fmt(m.get("no_answer_share"), 3), _fmt(m.get("closed_share"), 3)] if closing else [])
                   + [thr])
            row += [_fmt_value(_num(m.get("lambda")))] if has_lam else []
            rows.append(row + [_fmt_int(m.get("n"))])
        out.append(("table", headers, rows, set(range(2, len(headers)))))
        if closing:
            out.append(("p", "No answer: share of questions whose episode ended without a usable answer line (after "
                             "answer closing, when on); closed: share answered only because the chain was asked for "
                             "its answer at the end (answer_closing)."))
        if ref:
            out.append(("p", f"Reference method for the comparisons: {ref}. Harm rate: share of questions whose "
                             f"quality is below {ref}'s; gain/call: (quality − {ref}'s) per retrieval call; evidence "
                             "recall: share of a question's gold passages injected during its episode; R@k: "
                             "Recall@k of the retrieved lists — per retrieval call, the share of the question's gold "
                             "passages in the retriever's top-k, averaged over calls."))
    else:
        out.append(("p", "No methods."))

    for key in plot_keys:
        out.append(("img", key))

    comps = [c for c in summary.get("comparisons") or [] if isinstance(c, Mapping)]
    if comps:
        out.append(("h", 2, "Paired comparisons"))
        headers = ["method", "vs", f"Δ {quality_label(summary)} [95% CI]", "p (bootstrap)", "McNemar b/c", "p (McNemar)",
                   "p (Holm)", "significant"]
        rows = [[str(c.get("method", DASH)), str(c.get("reference", ref or DASH)),
                 _fmt_ci(c.get("diff"), c.get("lo"), c.get("hi"), signed=True), _fmt_p(c.get("p_bootstrap")),
                 f"{_fmt_int(c.get('b'))}/{_fmt_int(c.get('c'))}", _fmt_p(c.get("p_mcnemar")),
                 _fmt_p(c.get("p_holm")), _fmt_reject(c.get("reject"))] for c in comps]
        out.append(("table", headers, rows, {2, 3, 4, 5, 6}))
        out.append(("p", "b: questions only the method got right, c: questions only the reference got right; "
                         "significant: Holm-corrected p below the family-wise level."))

    mb = [r for r in summary.get("matched_budget") or [] if isinstance(r, Mapping)]
    if mb:
        budgets = sorted({b for r in mb if (b := _num(r.get("budget"))) is not None})
        names = list(dict.fromkeys(str(r.get("method")) for r in mb))
        cell = {(_num(r.get("budget")), str(r.get("method"))): r.get("accuracy") for r in mb}
        out.append(("h", 2, "Accuracy at matched retrieval budget"))
        rows = [[_fmt(b, 2)] + [_fmt(cell.get((b, n)), 3) for n in names] for b in budgets]
        out.append(("table", ["calls/q budget"] + names, rows, set(range(len(names) + 1))))

    dom = [str(s) for s in summary.get("dominance") or []]
    if dom:
        out.append(("h", 2, "Dominance"))
        out.append(("ul", dom))

    front = _frontier(summary)
    if front:
        out.append(("h", 2, "Pareto frontier"))
        out.append(("p", "Non-dominated methods (fewer calls, higher accuracy), by increasing calls: "
                         + " → ".join(front) + "."))

    for bname, groups in (summary.get("breakdowns") or {}).items():
        if not isinstance(groups, Mapping) or not groups:
            continue
        names = list(dict.fromkeys(n for g in groups.values() if isinstance(g, Mapping) for n in g))
        out.append(("h", 2, f"Breakdown {bname}"))
        rows = []
        for gname, g in groups.items():
            g = g if isinstance(g, Mapping) else {}
            ns = [v for m in g.values() if isinstance(m, Mapping) and (v := _num(m.get("n"))) is not None]
            row = [str(gname), _fmt_int(max(ns)) if ns else DASH]
            for n in names:
                m = g.get(n)
                m = m if isinstance(m, Mapping) else {}
                row.append(f"{_fmt(m.get('accuracy'), 3)} / {_fmt(m.get('calls'), 2)}")
            rows.append(row)
        out.append(("table", ["group", "n"] + names, rows, set(range(1, len(names) + 2))))
        out.append(("p", "Cells: accuracy / retrieval calls per question."))

    notes = [str(s) for s in summary.get("notes") or []]
    if notes:
        out.append(("h", 2, "Notes"))
        out.append(("ul", notes))
    return out


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A Markdown (GFM) table, no trailing newline: the one table helper of the benchmark reports.

    Cells are ``str()``-ed, except floats: ``f"{v:.3f}"`` below 100 in magnitude, ``f"{v:.0f}"`` from 100 on.
    Cells are not escaped. ``align`` is one delimiter per column (``"---"``, ``"--:"``, ``":-:"``, ...); by
    default the first column is left-aligned and the others right-aligned.

    Example:
        >>> print(markdown_table(["name", "value"], [["a", 0.12345], ["b", 1234.4]]))
        | name | value |
        |---|--:|
        | a | 0.123 |
        | b | 1234 |
    """
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
        return str(v)

    align = list(align) if align is not None else ["---"] + ["--:"] * (len(headers) - 1)
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])


def render_markdown(summary: Mapping[str, Any], plots: Mapping[str, str]) -> str:
    """The report as GitHub-flavoured Markdown.

    Args:
        summary: The benchmark summary (see the module docstring).
        plots: Figure key (``"pareto"``, ``"accuracy"``, ...) -> image path relative to the Markdown file.

    Returns:
        The Markdown text (ends with a newline).
    """
    lines = [f"# {summary.get('title') or 'Kairos benchmark'}", ""]
    for b in _blocks(summary, list(plots)):
        if b[0] == "h":
            lines += ["#" * b[1] + " " + b[2], ""]
        elif b[0] == "p":
            lines += [b[1], ""]
        elif b[0] == "ul":
            lines += [f"- {s}" for s in b[1]] + [""]
        elif b[0] == "table":
            headers, rows, numeric = b[1], b[2], b[3]
            align = ["---:" if i in numeric else "---" for i in range(len(headers))]
            lines += [markdown_table([_md_cell(h) for h in headers], [[_md_cell(c) for c in r] for r in rows], align),
                      ""]
        elif b[0] == "img":
            alt = PLOT_CAPTIONS.get(b[1], b[1])
            lines += [f"![{alt}]({plots[b[1]]})", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .85em; color: #555; }
"""


def render_html(summary: Mapping[str, Any], png_paths: Mapping[str, str | Path]) -> str:
    """The report as one self-contained HTML page (inline CSS, figures embedded as base64 PNGs).

    Args:
        summary: The benchmark summary (see the module docstring).
        png_paths: Figure key -> PNG file; a file that cannot be read is skipped with a warning.

    Returns:
        The HTML text.
    """
    esc = html.escape
    title = str(summary.get("title") or "Kairos benchmark")
    images: dict[str, str] = {}
    for key, p in png_paths.items():
        try:
            images[key] = base64.b64encode(Path(p).read_bytes()).decode("ascii")
        except OSError as e:
            log.warning("bench report: figure %s (%s) not embedded: %s", key, p, e)
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{esc(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>", f"<h1>{esc(title)}</h1>"]
    for b in _blocks(summary, list(images)):
        if b[0] == "h":
            parts.append(f"<h{b[1]}>{esc(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            parts.append(f"<p>{esc(b[1])}</p>")
        elif b[0] == "ul":
            parts.append("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in b[1]) + "</ul>")
        elif b[0] == "table":
            headers, rows, numeric = b[1], b[2], b[3]
            t = ["<table>", "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>",
                 "<tbody>"]
            for r in rows:
                t.append("<tr>" + "".join(f'<td class="num">{esc(c)}</td>' if i in numeric else f"<td>{esc(c)}</td>"
                                          for i, c in enumerate(r)) + "</tr>")
            parts.append("\n".join(t + ["</tbody>", "</table>"]))
        elif b[0] == "img":
            cap = PLOT_CAPTIONS.get(b[1], b[1])
            parts.append(f'<figure><img alt="{esc(cap)}" src="data:image/png;base64,{images[b[1]]}">'
                         f"<figcaption>{esc(cap)}</figcaption></figure>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------------------ report


def _write_utf8(path: Path, text: str) -> None:
    """Like :func:`envs.core.io.write_text` (atomic), but always UTF-8: the reports contain ✓, λ and –."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_report(summary: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write the figures, the Markdown and HTML reports and the summary itself into ``out_dir``.

    Every file is written atomically (temp file in the same directory, then rename), so an interrupted
    run never leaves a half-written report behind. ``summary.json`` is the summary as given (NaN is
    written as the JSON extension ``NaN``, which :func:`json.load` reads back).

    Args:
        summary: The benchmark summary (see the module docstring).
        out_dir: Output directory; created if missing.

    Returns:
        ``{"pareto", "accuracy", "markdown", "html", "summary"}`` -> path of the written file.

    Example:
        >>> summary = {"title": "demo", "reference": "CoT",
        ...            "methods": {"CoT": {"kind": "baseline", "accuracy": 0.41, "calls": 0.0},
        ...                        "IRCoT": {"kind": "baseline", "accuracy": 0.55, "calls": 3.1}}}
        >>> paths = write_report(summary, tmp_dir)  # doctest: +SKIP
        >>> sorted(p.name for p in paths.values())  # doctest: +SKIP
        ['accuracy.png', 'pareto.png', 'report.html', 'report.md', 'summary.json']
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"pareto": plot_pareto(summary, out / "pareto.png"),
             "accuracy": plot_accuracy_ci(summary, out / "accuracy.png")}
    md_path, html_path, json_path = out / "report.md", out / "report.html", out / "summary.json"
    _write_utf8(md_path, render_markdown(summary, {k: p.name for k, p in paths.items()}))
    _write_utf8(html_path, render_html(summary, paths))
    write_json(json_path, dict(summary))
    log.info("bench report written to %s (%d methods)", out, len(_methods(summary)))
    return {**paths, "markdown": md_path, "html": html_path, "summary": json_path}
