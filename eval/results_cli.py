"""``kairos results``: the tables of ``docs/results.md`` regenerated from the runs' JSON, by a program, not by hand.

A page marks a generated block with an HTML comment naming its source, and ends it with ``<!-- /table -->``::

    <!-- table: summary runs/bench/budgets/lambda=0.1/summary.json methods=CoT;Entropy[q: dev] -->
    … (regenerated) …
    <!-- /table -->

Kinds:

* ``summary PATH [methods=A;B;…] [by=ATTR]`` — a benchmark's ``summary.json`` as :mod:`eval.bench.tables`'s table
  (only the named methods when ``methods=`` is given; a breakdown with ``by=``);
* ``budgets PATH`` — a benchmark at every budget (``budgets.json``): the per-λ table, conditioned − specialist and
  the frontier area (:func:`eval.bench.budgets.budgets_markdown` without its title and figure);
* ``groups PATH`` — the paired comparisons of learned groups (``compare:``) of a ``summary.json``;
* ``detection PATH [part=table1|ablation|hedging] [splits=A;B] [rows=W;…] [detectors=A;B]`` — a
  ``kairos bench detection`` run's ``detection_bench.json`` (:mod:`eval.detection.report`): ``table1`` PUlSE's
  Table 1 layout (per detector AUROC [95% CI], PR-AUC, F1, precision, recall and threshold rule per split; only
  ``splits=`` when given), ``ablation`` PUlSE's ablations (only the variants whose label starts with a word of
  ``rows=``: ``parts`` magnitude / angle / both, ``interval``, ``pooling``), ``hedging`` the non-hedging check
  (``detectors=``, default PUlSE and ReProbe); without ``part=`` all three;
* ``suite PATH [methods=A;B;…]`` — a ``kairos bench suite`` run's ``summary.json`` (:mod:`eval.bench.suite`): method ×
  benchmark cells (quality / calls / harm rate) and the no-answer shares (only the named methods, in that order, with
  ``methods=``);
* ``projection PATH`` — a ``kairos bench projection`` run's ``projection.json`` (:mod:`eval.perf.projection`): its
  assumptions, one table per tokens-per-step and its sources;
* ``scaling PATH [measures=A;B;…]`` — a ``kairos bench scaling`` run's ``scaling_bench.json``
  (:mod:`eval.perf.scaling_report`): each axis' table (only the named measures' rows, with ``measures=``), what was
  skipped or masked, the machine and the command.

``kairos results update PAGE`` rewrites every block whose source exists (a missing source is reported and its
block kept: the runs live on the machine that made them); ``--check`` changes nothing and exits 1 when a block
would change.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

MARK = re.compile(r"^<!-- table: (\w+) (\S+)((?: \w+=[^>]*?)*) -->$")
END = "<!-- /table -->"

__all__ = ["render", "update_page"]


def _args(text: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"(\w+)=((?:(?! \w+=).)+)", text.strip()))


def render(kind: str, path: str, args: dict[str, str] | None = None) -> str:
    """The block of one marker (see the module docstring)."""
    from eval.bench.budgets import budgets_markdown
    from eval.bench.tables import breakdown_table, methods_table

    args = args or {}
    data = json.loads(Path(path).read_text())
    if kind == "summary":
        if args.get("methods"):
            keep = [m.strip() for m in args["methods"].split(";")]  # (names hold commas)
            missing = [m for m in keep if m not in data["methods"]]
            if missing:
                raise ValueError(f"{path}: no method {missing[0]!r} (methods: {', '.join(data['methods'])})")
            data = {**data, "methods": {k: data["methods"][k] for k in keep}}
        out = [methods_table(data)]
        if args.get("by"):
            out.append(breakdown_table(data, args["by"]))
        return "\n\n".join(x for x in out if x)
    if kind == "budgets":
        text = budgets_markdown(data)
        body = [ln for ln in text.splitlines()[1:] if not ln.startswith("![")]
        return "\n".join(body).strip()
    if kind == "groups":
        rows = ["| A − B | seeds | reward [95% CI] | accuracy [95% CI] | calls [95% CI] |", "|---|---|---|---|---|"]
        for c in data.get("group_comparisons") or []:
            r, q, n = c["reward"], c["quality"], c["calls"]
            rows.append(f"| {c['a']} − {c['b']} | | {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}] | "
                        f"{q['diff']:+.3f} [{q['lo']:+.3f}, {q['hi']:+.3f}] | {n['diff']:+.2f} [{n['lo']:+.2f}, "
                        f"{n['hi']:+.2f}] |")
        return "\n".join(rows)
    if kind == "detection":
        return _detection(data, args)
    if kind == "suite":
        from eval.bench.suite import render_markdown

        if args.get("methods"):
            keep = [m.strip() for m in args["methods"].split(";")]
            missing = [m for m in keep if m not in data["methods"]]
            if missing:
                raise ValueError(f"{path}: no method {missing[0]!r} (methods: {', '.join(data['methods'])})")
            data = {**data, "methods": {k: data["methods"][k] for k in keep}}
        return render_markdown("", data).split("\n", 2)[2].strip()  # without its title line
    if kind == "projection":
        from eval.perf.projection import format_markdown

        return format_markdown(data).strip()
    if kind == "scaling":
        from eval.perf.scaling_report import axes_markdown

        return axes_markdown(data, tuple(m.strip() for m in args.get("measures", "").split(";") if m.strip()))
    raise ValueError(f"unknown table kind {kind!r} (summary | budgets | groups | detection | suite | projection | "
                     "scaling)")


def _detection(data: dict[str, Any], args: dict[str, str]) -> str:
    """A detection run's tables (see the module docstring)."""
    from eval.detection.report import ablation_table, hedging_table, interval_note, split_lines, table1

    def names(key: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in args.get(key, "").split(";") if x.strip())

    part = args.get("part", "").strip()
    if part not in ("", "table1", "ablation", "hedging"):
        raise ValueError(f"detection: unknown part {part!r} (table1 | ablation | hedging)")
    out = []
    if part in ("", "table1"):
        out.append("\n".join(split_lines(data, names("splits"))) + "\n\n" + table1(data, names("splits")))
    if part in ("", "ablation"):
        table = ablation_table(data, names("rows"))
        out.append(table + "\n\n" + interval_note(data) + "." if table else "(no ablations in this run)")
    if part in ("", "hedging"):
        out.append(hedging_table(data, names("detectors") or ("pulse", "reprobe")))
    return "\n\n".join(out)


def _render_block(page: Path, line: int, kind: str, path: str, rest: str) -> str:
    """:func:`render` of the marker at ``page:line``; a source that is not JSON, or a JSON of another shape than
    the kind reads, is a :class:`ValueError` naming the page's line, the kind and the source (not a traceback)."""
    where = f"{page}:{line}: table {kind} {path}"
    try:
        return render(kind, path, _args(rest))
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: the source is not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: the source is not UTF-8 text") from None
    except KeyError as e:
        raise ValueError(f"{where}: the source is not a {kind} JSON (it has no field {e.args[0]!r}); point the "
                         f"marker at the file its kind reads (see `kairos results update --help`)") from None
    except (TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"{where}: the source is not a {kind} JSON (a field has another shape: {e}); point the "
                         f"marker at the file its kind reads") from None
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def update_page(page: str | Path, check: bool = False) -> dict[str, Any]:
    """Regenerate every marked block of ``page`` (written atomically unless ``check``). Returns
    ``{"updated": [...], "missing": [...], "changed": bool}``."""
    from envs.core.io import write_text

    page = Path(page)
    lines = page.read_text(encoding="utf-8").splitlines()
    out, updated, missing, i = [], [], [], 0
    while i < len(lines):
        m = MARK.match(lines[i].strip())
        out.append(lines[i])
        i += 1
        if not m:
            continue
        end = next((j for j in range(i, len(lines)) if lines[j].strip() == END), None)
        nested = next((j for j in range(i, end if end is not None else len(lines)) if MARK.match(lines[j].strip())),
                      None)
        if nested is not None:  # the block would swallow the next marker (and its table) with it
            raise ValueError(f"{page}:{i}: '{lines[i - 1].strip()}' has no closing {END} before the next marker "
                             f"(line {nested + 1}); add {END} after its table")
        if end is None:
            raise ValueError(f"{page}:{i}: '{lines[i - 1].strip()}' has no closing {END}")
        kind, path, rest = m.group(1), m.group(2), m.group(3)
        if Path(path).is_file():
            out += ["", _render_block(page, i, kind, path, rest), ""]
            updated.append(path)
        else:
            out += lines[i:end]
            missing.append(path)
        out.append(lines[end])
        i = end + 1
    text = "\n".join(out) + "\n"
    changed = text != page.read_text(encoding="utf-8")
    if changed and not check:
        write_text(page, text)
    return {"updated": updated, "missing": missing, "changed": changed}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results", help="regenerate the marked tables of a results page from the runs' JSON")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    u = verbs.add_parser("update", help="rewrite every <!-- table: … --> block whose source exists")
    u.add_argument("page", nargs="?", default="docs/results.md")
    u.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block would change")
    u.set_defaults(func=_update)


def _update(args) -> int:
    r = update_page(args.page, check=args.check)
    for path in r["missing"]:
        print(f"kept (no such file here): {path}")
    print(f"{'would change' if r['changed'] and args.check else 'updated' if r['changed'] else 'unchanged'}: "
          f"{args.page} ({len(r['updated'])} blocks from their runs)")
    return 1 if args.check and r["changed"] else 0
