"""``kairos bench suite``: several policy benchmarks in one run and one summary table across them.

Each entry of the suite is a ``kairos bench policies`` config (:class:`eval.bench.policies.BenchConfig`). Every
config is loaded and validated first — a typo in the fifth benchmark fails before the first one starts — then
the benchmarks run one after another (each resumable through its own per-question results, so a rerun after a
crash continues where it stopped), and the suite writes ``<out_dir>/summary.json`` and ``summary.md``:

- one table, method × benchmark: the benchmark's quality metric (F1 for extractive answers, accuracy for
  multiple choice and yes/no/maybe), retrieval calls per question and harm rate (the share of questions answered
  worse than CoT);
- one table of the share of episodes that ended without a usable answer, per method and benchmark (after answer
  closing, when the benchmark's env has it on).

Usage::

    kairos bench suite --config configs/suite_seed_benchmarks.yaml
    kairos bench suite --config configs/suite_seed_benchmarks.yaml --set dev=0:2 test=2:6 --out runs/smoke
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.core.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)


@dataclass
class SuiteConfig(ConfigBase):
    """A list of policy benchmarks run together (``kairos bench suite``)."""

    name: str = helpf("suite", "suite name (summary title)")
    out_dir: str = helpf("runs/bench/suite", "where the suite's summary goes (each benchmark keeps its own out_dir, "
                                             "or <out_dir>/<name> with --out)")
    plugins: list[str] = helpf([], "plug-in modules imported first (on the driver; a user's signal, trigger, cost, "
                                   "retriever … registers on import, then its name is valid anywhere in this config); "
                                   "every benchmark of the suite gets them too")
    benchmarks: list[str] = field(default_factory=list, metadata={"help": "BenchConfig YAML files, in run order"})
    overrides: list[str] = helpf([], "KEY=VALUE overrides applied to every benchmark (as `kairos bench policies "
                                     "--set`), e.g. [dev=0:2, test=2:6] for a smoke run")

    def validate(self) -> None:
        if not self.benchmarks:
            raise ConfigError("SuiteConfig: 'benchmarks' is empty")
        if len(set(self.benchmarks)) != len(self.benchmarks):
            raise ConfigError("SuiteConfig: a benchmark is listed twice")


def load_suite(path: str, out: str | None = None, overrides: list[str] | None = None):
    """``(SuiteConfig, [BenchConfig])``: the suite and every benchmark config, validated (nothing runs)."""
    from envs.core.config import read_yaml_mapping
    from eval.bench.policies import load_config

    suite = SuiteConfig.from_dict(read_yaml_mapping(path), where=str(path))
    if out:
        suite.out_dir = out
    sets = list(suite.overrides) + list(overrides or [])
    benches = []
    for b in suite.benchmarks:
        if not Path(b).is_file():
            raise ConfigError(f"{path}: benchmarks: {b} does not exist")
        cfg = load_config(b, None, sets, plugins=suite.plugins)
        if out:  # a suite run elsewhere keeps every benchmark's results under its own out_dir
            cfg.out_dir = str(Path(out) / cfg.name)
        benches.append(cfg)
    names = [c.name for c in benches]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: two benchmarks share a name ({names}); names key the summary's columns")
    return suite, benches


def summary_rows(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The suite's tables from each benchmark's ``summary.json`` content: ``{"benchmarks": {name: {"metric",
    "n_test"}}, "methods": {method: {benchmark: {"quality", "calls", "harm_rate", "no_answer_share"}}}}``."""
    from eval.bench.report import quality_label

    benches, methods = {}, {}
    for b, s in results.items():
        benches[b] = {"metric": quality_label(s), "n_test": (s.get("setup") or {}).get("n_test"),
                      "task": (s.get("setup") or {}).get("task")}
        for m, v in (s.get("methods") or {}).items():
            methods.setdefault(m, {})[b] = {"quality": v.get("accuracy"), "calls": v.get("calls"),
                                             "harm_rate": v.get("harm_rate"), "no_answer_share": v.get("no_answer_share"),
                                             "metrics": v.get("metrics")}
    return {"benchmarks": benches, "methods": methods}


def render_markdown(title: str, table: dict[str, Any]) -> str:
    """The suite summary as Markdown: method × benchmark cells ``quality / calls / harm``, then no-answer shares."""
    from eval.bench.report import markdown_table

    benches = list(table["benchmarks"])

    def f(x, nd):
        return "–" if x is None else f"{x:.{nd}f}"

    head = ["method"] + [f"{b} ({table['benchmarks'][b]['metric']}, n={table['benchmarks'][b]['n_test']})"
                         for b in benches]
    rows = [[m] + [(lambda c: "–" if c is None else f"{f(c['quality'], 3)} / {f(c['calls'], 2)} / "
                   f"{f(c['harm_rate'], 3)}")(cells.get(b)) for b in benches]
            for m, cells in table["methods"].items()]
    na = [[m] + [f((cells.get(b) or {}).get("no_answer_share"), 3) for b in benches]
          for m, cells in table["methods"].items()]
    return (f"# {title}\n\nCells: quality metric / retrieval calls per question / harm rate (share of test questions "
            f"answered worse than CoT). '–': not run on that benchmark (skipped: see its report).\n\n"
            + markdown_table(head, rows) + "\n\nShare of test episodes that ended without a usable answer line "
            "(after answer closing):\n\n" + markdown_table(["method"] + benches, na) + "\n")


def run_suite(suite: SuiteConfig, benches: list) -> dict[str, Any]:
    """Run every benchmark (in order), then write the suite summary. Returns it."""
    from envs.core.io import write_json, write_text
    from eval.bench.policies import run_bench

    results = {}
    for i, cfg in enumerate(benches, 1):
        log.info("suite %s: [%d/%d] %s -> %s", suite.name, i, len(benches), cfg.name, cfg.out_dir)
        results[cfg.name] = run_bench(cfg)
    table = summary_rows(results)
    out = Path(suite.out_dir)
    summary = {"title": f"Kairos benchmark suite: {suite.name}", "benchmarks": suite.benchmarks,
               "out_dirs": {c.name: c.out_dir for c in benches}, **table}
    write_json(out / "summary.json", summary)
    write_text(out / "summary.md", render_markdown(summary["title"], table))
    log.info("suite summary: %s", out / "summary.md")
    return summary


def register(sub: argparse._SubParsersAction) -> None:
    from eval.bench.policies import INTERRUPTED

    p = sub.add_parser("suite", help="several policy benchmarks in one run, one summary table (method × benchmark)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="SuiteConfig YAML (e.g. configs/suite_seed_benchmarks.yaml)")
    p.add_argument("--out", default=None, help="write the summary here and each benchmark under <out>/<name>")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides for every benchmark, e.g. dev=0:2 test=2:6")
    p.set_defaults(func=main, interrupted=INTERRUPTED)


def main(args) -> int:
    import torch

    torch.set_num_threads(1)
    suite, benches = load_suite(args.config, args.out, args.set)
    summary = run_suite(suite, benches)
    print(render_markdown(summary["title"], {k: summary[k] for k in ("benchmarks", "methods")}))
    print(f"summary: {Path(suite.out_dir).resolve() / 'summary.md'}")
    return 0
