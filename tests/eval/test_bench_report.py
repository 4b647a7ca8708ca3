"""Tests for eval.bench.report: figures, Markdown, self-contained HTML and summary.json."""

from __future__ import annotations

import base64
import copy
import json
import math
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from eval.bench.report import plot_accuracy_ci, plot_pareto, render_html, render_markdown, write_report

PNG_SIG = b"\x89PNG\r\n\x1a\n"


def _curve(points: list[tuple[float, float, float]]) -> list[dict[str, float]]:
    return [{"threshold": t, "accuracy": a, "calls": c} for t, a, c in points]


def _method(kind: str, acc: float, calls: float, **kw: Any) -> dict[str, Any]:
    m = {"kind": kind, "accuracy": acc, "acc_lo": acc - 0.05, "acc_hi": acc + 0.05, "calls": calls,
         "tokens": 812.0 + 300 * calls, "seconds": 0.4 + 0.2 * calls, "reward": acc - 0.1 * calls,
         "gain_per_call": 0.31 if calls else None, "gold_injected_share": 0.62 if calls else None, "n": 300,
         "threshold": None, "curve": None, "lambda": None}
    m.update(kw)
    return m


@pytest.fixture
def summary() -> dict[str, Any]:
    methods = {
        "CoT": _method("baseline", 0.412, 0.0),
        "IRCoT": _method("baseline", 0.583, 3.4),
        "FLARE(minprob)": _method("fixed", 0.551, 1.12, threshold=0.5, curve=_curve(
            [(0.3, 0.47, 0.41), (0.5, 0.55, 1.10), (0.7, 0.57, 1.9), (0.9, 0.58, 2.8)])),
        "RSUS": _method("fixed", 0.532, 0.94, threshold=0.6, curve=_curve(
            [(0.4, 0.56, 2.1), (0.6, 0.53, 0.95), (0.65, 0.50, 0.6)])),
        "learned": _method("learned", 0.566, 0.88, **{"lambda": 0.1}),
        "random(p=0.3)": _method("random", 0.49, 1.05),
        "oracle": _method("oracle", 0.71, 0.52),
    }
    comparisons = [
        {"method": n, "reference": "CoT", "diff": methods[n]["accuracy"] - 0.412, "lo": 0.05, "hi": 0.2,
         "p_bootstrap": p, "b": 61, "c": 12, "p_mcnemar": p / 2, "p_holm": min(1.0, p * 3), "reject": p * 3 < 0.05}
        for n, p in (("learned", 0.00002), ("FLARE(minprob)", 0.0012), ("random(p=0.3)", 0.2))
    ]
    return {
        "title": "Kairos benchmark: micro-world dev[100:400]",
        "setup": {"dataset": "microworld", "split": "dev[100:400]", "n": 300, "reasoner": "toy|v2",
                  "retriever": "bm25", "lambda": 0.1, "seeds": [0, 1]},
        "reference": "CoT",
        "methods": methods,
        "comparisons": comparisons,
        "matched_budget": [{"budget": b, "method": n, "accuracy": a}
                           for b in (0.5, 1.0) for n, a in (("learned", 0.55 + b / 20), ("RSUS", None))],
        "dominance": ["learned dominates RSUS at every budget in [0.20, 1.50] calls/question"],
        "frontier": ["CoT", "oracle"],
        "breakdowns": {"by hops": {"2": {"CoT": {"accuracy": 0.5, "calls": 0.0, "n": 150},
                                         "learned": {"accuracy": 0.63, "calls": 0.7, "n": 150}},
                                   "3": {"CoT": {"accuracy": 0.32, "calls": 0.0, "n": 150}}}},
        "notes": ["thresholds calibrated on dev[0:100]", "a <b>bold</b> & risky note"],
    }


class _ImgParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[dict[str, str | None]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a)
        if tag in ("script", "link") or (tag != "img" and (a.get("src") or a.get("href"))):
            self.external.append(tag)


def _png_ok(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIG)
    assert 5_000 < len(data) < 2_000_000


def test_write_report_files(summary: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "rep"
    paths = write_report(summary, out)
    assert {p.name for p in paths.values()} == {"pareto.png", "accuracy.png", "report.md", "report.html",
                                                "summary.json"}
    for p in paths.values():
        assert p.is_file() and p.parent == out
    _png_ok(paths["pareto"])
    _png_ok(paths["accuracy"])
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left behind

    parser = _ImgParser()
    parser.feed(paths["html"].read_text(encoding="utf-8"))
    assert len(parser.imgs) == 2 and not parser.external
    for img in parser.imgs:
        src = img["src"] or ""
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix) and img.get("alt")
        assert base64.b64decode(src[len(prefix):], validate=True).startswith(PNG_SIG)

    md = paths["markdown"].read_text(encoding="utf-8")
    for name in summary["methods"]:
        assert name in md
    assert "![" in md and "(pareto.png)" in md and "(accuracy.png)" in md
    rows = {ln.split("|")[1].strip(): ln for ln in md.splitlines() if ln.startswith("| ")}
    assert "<1e-4" in md and "0.0012" in md
    comp_rows = [ln for ln in md.splitlines() if ln.startswith("| ") and " | CoT | +" in ln]
    assert len(comp_rows) == len(summary["comparisons"])
    assert any("learned" in ln and "✓" in ln and "61/12" in ln for ln in comp_rows)
    assert "0.583 [0.533, 0.633]" in rows["IRCoT"]
    assert "toy\\|v2" in md  # pipes in cells are escaped
    assert json.loads(paths["summary"].read_text()) == summary


def test_html_escapes_and_same_content(summary: dict[str, Any], tmp_path: Path) -> None:
    paths = write_report(summary, tmp_path)
    page = paths["html"].read_text(encoding="utf-8")
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt; &amp; risky" in page
    for name in summary["methods"]:
        assert name in page
    for s in summary["dominance"] + ["Pareto frontier", "by hops", "Paired comparisons", "<1e-4".replace("<", "&lt;")]:
        assert s in page
    assert "http://" not in page and "https://" not in page


def test_robust_to_missing_fields(summary: dict[str, Any], tmp_path: Path) -> None:
    s = copy.deepcopy(summary)
    for m in s["methods"].values():
        m["curve"] = None
    s["methods"]["RSUS"].update(accuracy=float("nan"), acc_lo=None, acc_hi=None, calls=None, tokens=math.nan)
    s["methods"]["IRCoT"] = {"kind": "baseline"}  # nothing but a kind
    s["comparisons"] = []
    s["matched_budget"] = []
    s["breakdowns"] = {}
    s["notes"] = []
    s.pop("frontier")
    paths = write_report(s, tmp_path)
    _png_ok(paths["pareto"])
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "Paired comparisons" not in md and "matched" not in md
    assert "Pareto frontier" in md  # computed from the points when the summary has none
    assert "| RSUS | fixed | – | – |" in md
    assert json.loads(paths["summary"].read_text())["methods"]["RSUS"]["tokens"] != 0  # NaN survives


def test_single_and_empty(tmp_path: Path) -> None:
    one = {"title": "one", "methods": {"CoT": {"kind": "baseline", "accuracy": 0.4, "calls": 0.0}}}
    paths = write_report(one, tmp_path / "one")
    assert "CoT" in paths["markdown"].read_text(encoding="utf-8")
    empty: dict[str, Any] = {"methods": {}}
    assert plot_pareto(empty, tmp_path / "p.png").read_bytes().startswith(PNG_SIG)
    assert plot_accuracy_ci(empty, tmp_path / "a.png").read_bytes().startswith(PNG_SIG)
    assert "No methods." in render_markdown(empty, {})
    assert render_html(empty, {"missing": tmp_path / "nope.png"}).count("<img") == 0


def test_results_table_renders_a_summary(tmp_path):
    import json

    from eval.bench.tables import main

    s = {"setup": {"lambda_retrieval": 0.1, "n_test": 2}, "best_fixed": "F", "notes": ["Best fixed trigger: F."],
         "methods": {"F": {"kind": "fixed", "accuracy": 0.5, "acc_lo": 0.0, "acc_hi": 1.0, "calls": 1.0, "reward": 0.4,
                           "harm_rate": 0.0, "query_mode": "info_need"},
                     "L": {"kind": "learned", "accuracy": 1.0, "acc_lo": 1.0, "acc_hi": 1.0, "calls": 1.0,
                           "reward": 0.9, "harm_rate": 0.0, "vs_best_fixed": {"diff": 0.5, "lo": 0.1, "hi": 0.9},
                           "oracle_gap_fraction": {"fraction": 0.5, "lo": 0.2, "hi": 0.8}}},
         "breakdowns": {"by kind": {"a": {"F": {"accuracy": 0.5, "calls": 1.0, "n": 2},
                                          "L": {"accuracy": 1.0, "calls": 1.0, "n": 2}}}}}
    p = tmp_path / "summary.json"
    p.write_text(json.dumps(s))
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main([str(p), "--by", "kind"])
    out = buf.getvalue()
    assert "| F (best fixed, chosen on dev) | fixed | 0.500 [0.000, 1.000] | 1.00 | 0.400 |" in out
    assert "+0.500 [+0.100, +0.900] | 0.50 [0.20, 0.80] |" in out
    assert "| L | 0.900 (1.00 @ 1.00) |" in out and "a (n=2)" in out
