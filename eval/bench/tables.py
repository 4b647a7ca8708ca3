"""Compact Markdown tables of a policy benchmark's ``summary.json`` — what ``docs/results.md`` holds.

One table of every method (accuracy with its CI, calls, reward, harm rate, query mode, and for learned methods
the paired difference to the best fixed trigger and the oracle-gap fraction, each with its CI), then reward and
accuracy per group of a breakdown (e.g. the micro-world's chain kinds).

Example (shell)::

    python -m eval.bench.tables runs/quickstart/bench/summary.json --by chain_kind
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any


def md_name(name: str) -> str:
    """A method name as Markdown text: a ``[`` that would open a link (``learned[QueryGen](λ=0.1)``,
    ``RSUS[ent][q: dev]``) is escaped, so GitHub and the docs site (``mkdocs build --strict``) show the name.

    >>> md_name("learned[QueryGen](λ=0.1)"), md_name("FLARE[q: dev]")
    ('learned\\\\[QueryGen](λ=0.1)', 'FLARE[q: dev]')
    """
    return re.sub(r"(?<!\\)\[(?=[^\]]*\][\[(])", r"\\[", name)


def _ci(v: dict | None, key: str = "diff", nd: int = 3, signed: bool = True) -> str:
    """``value [lo, hi]`` of a statistics dict (the report's own formatting); ``–`` when absent."""
    from eval.bench.format import DASH, _fmt_ci

    return _fmt_ci(v[key], v["lo"], v["hi"], nd, signed) if v else DASH


def _acc(v: dict) -> str:
    from eval.bench.format import _fmt_ci

    return _fmt_ci(v["accuracy"], v["acc_lo"], v["acc_hi"])


def methods_table(s: dict[str, Any]) -> str:
    lam = s["setup"]["lambda_retrieval"]
    metric = {"f1": "F1", "em": "EM"}.get(s["setup"].get("quality_metric", "accuracy"), "accuracy")
    rows = [f"| method | kind | {metric} [95% CI] | calls / q | reward | harm rate | query mode | "
            "− best fixed [95% CI] | oracle-gap fraction [95% CI] |", "|---|---|---|---|---|---|---|---|---|"]
    for k, v in sorted(s["methods"].items(), key=lambda kv: -kv[1]["reward"]):
        harm = "–" if v.get("harm_rate") is None else f"{v['harm_rate']:.3f}"
        mark = " (best fixed, chosen on dev)" if k == s.get("best_fixed") else ""
        rows.append(f"| {md_name(k)}{mark} | {v['kind']} | {_acc(v)} | "
                    f"{v['calls']:.2f} | {v['reward']:.3f} | {harm} | {v.get('query_mode') or ('–' if v['calls'] == 0 else 'env default')} | "
                    f"{_ci(v.get('vs_best_fixed'))} | {_ci(v.get('oracle_gap_fraction'), 'fraction', 2, False)} |")
    return "\n".join(rows) + f"\n\nreward = {metric} − {lam:g} · calls; n = {s['setup']['n_test']} test questions."


def breakdown_table(s: dict[str, Any], by: str, lam: float | None = None) -> str:
    lam = s["setup"]["lambda_retrieval"] if lam is None else lam
    table = s["breakdowns"].get(f"by {by}")
    if not table:
        return ""
    groups = list(table)
    names = sorted(s["methods"], key=lambda k: -s["methods"][k]["reward"])
    head = "| method | " + " | ".join(f"{g} (n={next(iter(table[g].values()))['n']})" for g in groups) + " |"
    rows = [head, "|---|" + "---|" * len(groups)]
    for k in names:
        cells = []
        for g in groups:
            c = table[g].get(k)
            cells.append("–" if c is None else f"{c['accuracy'] - lam * c['calls']:.3f} ({c['accuracy']:.2f} @ "
                                              f"{c['calls']:.2f})")
        rows.append(f"| {md_name(k)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + f"\n\nPer {by}: reward (accuracy @ calls per question)."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("summary", help="a bench out_dir's summary.json")
    p.add_argument("--by", nargs="*", default=[], help="breakdowns to add (group_by attributes of the bench)")
    args = p.parse_args(argv)
    s = json.loads(Path(args.summary).read_text())
    out = [methods_table(s)] + [breakdown_table(s, b) for b in args.by]
    print("\n\n".join(x for x in out if x))
    notes = [n for n in s.get("notes", []) if "over 3 seeds" in n or "Best fixed" in n]
    if notes:
        print("\n" + "\n".join(f"- {n}" for n in notes))
    return 0


if __name__ == "__main__":
    from envs.core.cli_errors import run_handled

    raise SystemExit(run_handled("python -m eval.bench.tables", main))
