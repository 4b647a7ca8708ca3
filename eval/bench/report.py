"""Render a precomputed retrieval-policy benchmark summary as plots, Markdown and self-contained HTML (the plots are
:mod:`eval.bench.plots`', the number formatting :mod:`eval.bench.format`'s; both re-exported here).

The benchmark compares *retrieval policies* (when a step-by-step reasoner should call its retriever)
on accuracy against retrieval calls per question. Everything statistical (bootstrap CIs, McNemar,
Holm correction, Pareto frontier, matched-budget interpolation) is computed upstream; this module only
draws and formats a ``summary`` dict of this shape::

    {
      "title": "Kairos benchmark: micro-world dev[100:400]",
      "setup": {"dataset": ..., "n": 300, "lambda": 0.1, ...},          # free-form key -> value
      "reference": "CoT",
      # a threshold: a number, or "never" (the never-fire point chosen on dev: the row is CoT's)
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
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envs.core.io import atomic_open, write_json
from eval.bench.format import (
    DASH,
    _fmt,
    _fmt_big,
    _fmt_ci,
    _fmt_int,
    _fmt_p,
    _fmt_reject,
    _fmt_value,
    _frontier,
    _methods,
    _num,
    metric_label,
    quality_label,
)
from eval.bench.plots import plot_accuracy_ci, plot_pareto

log = logging.getLogger(__name__)

__all__ = ["DASH", "markdown_table", "metric_label", "plot_accuracy_ci", "plot_pareto", "quality_label",
           "render_html", "render_markdown", "write_report"]

PLOT_CAPTIONS = {"pareto": "Accuracy vs retrieval calls per question",
                 "accuracy": "Accuracy per method with 95% bootstrap CI"}



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
            # the never-fire point chosen on dev: the row is CoT's (its name stays, the column says so)
            thr = "never" if m.get("threshold") == "never" else _fmt(m.get("threshold"), 3)
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

    for bname, groups, names in _group_tables(summary, "breakdowns"):
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

    for bname, groups, names in _group_tables(summary, "oracle_gap_by"):
        out.append(("h", 2, f"Oracle-gap fraction {bname}"))
        rows = []
        for gname, g in groups.items():
            g = g if isinstance(g, Mapping) else {}
            first = next((m for m in g.values() if isinstance(m, Mapping)), {})
            row = [str(gname), _fmt_int(first.get("n")), _fmt(first.get("fixed_calls"), 2),
                   _fmt(first.get("oracle_calls"), 2)]
            for n in names:
                m = g.get(n)
                m = m if isinstance(m, Mapping) else {}
                frac = m.get("fraction")
                frac = (_fmt_ci(frac, m.get("lo"), m.get("hi"), nd=2) if _num(frac) is not None
                        else f"– (gap {_fmt(m.get('gap'), 3)})")
                row.append(f"{frac} / {_fmt(m.get('calls'), 2)}")
            rows.append(row)
        out.append(("table", ["group", "n", "best fixed calls", "oracle calls"] + names, rows,
                    set(range(1, len(names) + 4))))
        out.append(("p", f"Cells: fraction of the gap between the best fixed trigger ({summary.get('best_fixed')}) "
                         f"and the ceiling ({summary.get('oracle')}) that the learned row closes on the group's "
                         "questions [95% CI, paired bootstrap] / its retrieval calls per question; – where the "
                         "ceiling is less than 0.02 reward above the best fixed trigger (no gap to speak of)."))

    notes = [str(s) for s in summary.get("notes") or []]
    if notes:
        out.append(("h", 2, "Notes"))
        out.append(("ul", notes))
    return out


def _group_tables(summary: Mapping[str, Any], key: str):
    """``(table name, {group: {method: cells}}, the methods in order)`` of each non-empty per-group table under
    ``summary[key]`` (``breakdowns``, ``oracle_gap_by``)."""
    for bname, groups in (summary.get(key) or {}).items():
        if isinstance(groups, Mapping) and groups:
            yield bname, groups, list(dict.fromkeys(n for g in groups.values() if isinstance(g, Mapping) for n in g))


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
    from envs.core.io import make_dir, writing

    out = make_dir(out_dir)
    with writing(out / "pareto.png"):
        pareto = plot_pareto(summary, out / "pareto.png")
    with writing(out / "accuracy.png"):
        accuracy = plot_accuracy_ci(summary, out / "accuracy.png")
    paths = {"pareto": pareto, "accuracy": accuracy}
    md_path, html_path, json_path = out / "report.md", out / "report.html", out / "summary.json"
    _write_utf8(md_path, render_markdown(summary, {k: p.name for k, p in paths.items()}))
    _write_utf8(html_path, render_html(summary, paths))
    write_json(json_path, dict(summary))
    log.info("bench report written to %s (%d methods)", out, len(_methods(summary)))
    return {**paths, "markdown": md_path, "html": html_path, "summary": json_path}
