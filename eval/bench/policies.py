"""``kairos bench policies``: learned policies versus calibrated fixed triggers and published baselines (docs/design.md §8).

This module runs the benchmark (:func:`run_bench`) and is its CLI; the parts live in :mod:`eval.bench` — the
method kinds (:mod:`eval.bench.methods`, :mod:`eval.bench.kinds`), the config, the runner, calibration and the
summary — and are re-exported here.

The main flow (:func:`run_bench`), top to bottom:

1. build the env components once (one reasoner, one retriever, one corpus for every method);
2. run CoT (never retrieve) on the **dev** questions — its step signals give each threshold trigger an
   automatic threshold grid (quantiles), when the config does not list one;
3. **calibrate** every threshold trigger on dev: sweep its grid and the never-fire point (``never``: the trigger
   never retrieves, CoT's row), keep the point with the best reward ``quality − Σ λ·cost`` (ties: fewer calls,
   so never-fire wins an exact tie). Thresholds are never copied from papers;
4. run every method on the **test** questions (one JSONL row per question: decisions, signals, queries,
   passages, answer, costs, tokens, seconds; rerunning skips finished questions, so a crash resumes);
   threshold triggers also sweep their grid on test, which draws their accuracy-vs-calls curve (from the
   never-fire point at 0 calls);
   Random runs at the retrieval rate of the method it is matched to, over several seeds;
5. statistics (:mod:`eval.bench.summary`, :mod:`eval.stats`): bootstrap CIs, paired bootstrap and exact McNemar (Holm-corrected) of
   every method against the reference, accuracy at matched retrieval budgets, frontier dominance, the
   Pareto frontier;
6. the report (:mod:`eval.bench.report`): ``summary.json``, ``report.md``, ``report.html`` with PNG plots.

A method whose signal the env does not produce (e.g. DRAGIN's RIND on a backend without attentions) is
*skipped with its reason in the report*, never silently replaced.

Example config (``configs/bench_microworld.yaml``)::

    env: {task: microworld, split: dev, rsus_components: [ent]}
    dev: "0:100"
    test: "100:400"
    lambda_retrieval: 0.1
    methods:
      - {name: CoT, kind: never}
      - {name: FLARE, kind: flare}                        # FLARE as published: the masked step as the query
      - {name: "FLARE[unmasked]", kind: threshold, signal: minprob, direction: below}
      - {name: Random, kind: random, match: "FLARE[unmasked]", seeds: 3}
      - {name: learned, kind: learned, path: runs/train/microworld/policy_trigger, lam: 0.1}
"""


from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
from typing import Any

from envs.core.config import ConfigError, read_yaml_mapping
from eval.bench.calibration import (
    PROB_GRID,
    QUANTILES,
    auto_grid,
    average_seeds,
    cache_oracle,
    calibrate,
    retrieval_rate,
    select_learned,
    snapshot_candidates,
)
from eval.bench.config import BenchConfig, bench_env_config, load_config, load_record, parse_slice
from eval.bench.methods import METHOD_KINDS, MethodSpec, RunContext, Skip, make_trigger
from eval.bench.runner import Runner, evaluated_setup, runner_probe_names
from eval.bench.summary import summarize

__all__ = ["METHOD_KINDS", "PROB_GRID", "QUANTILES", "BenchConfig", "MethodSpec", "Runner", "auto_grid",
           "average_seeds", "bench_env_config", "cache_oracle", "calibrate", "evaluated_policy", "evaluated_setup",
           "load_config", "make_trigger", "parse_slice", "retrieval_rate", "run_bench", "runner_probe_names",
           "select_learned", "snapshot_candidates", "summarize"]

log = logging.getLogger(__name__)


def run_bench(cfg: BenchConfig, components=None) -> dict[str, Any]:
    """Calibrate on dev, evaluate on test, compute statistics and write the report. Returns the summary. Holds
    ``cfg.out_dir``'s lock (:class:`envs.core.runlock.FolderLock`): a second benchmark on the folder refuses."""
    from envs.core.runlock import FolderLock

    with FolderLock(cfg.out_dir):
        if cfg.lambdas:  # every budget: a benchmark per λ, then the frontier (eval.bench.budgets)
            from eval.bench.budgets import run_budgets

            return run_budgets(cfg, lambda c: run_bench(c, components))
        return _run_bench(cfg, components)


def _run_bench(cfg: BenchConfig, components=None) -> dict[str, Any]:
    from envs.components import scalar_signals
    from envs.core.io import write_json
    from eval.bench.report import write_report
    from policies.triggers import NeverTrigger

    dev, test = parse_slice(cfg.dev, "dev"), parse_slice(cfg.test, "test")
    runner = Runner(cfg, components)
    write_json(Path(cfg.out_dir) / "config.json", cfg.to_dict())  # what ran (evaluated_policy reads it back)
    n_split = len(runner.components.questions)
    if max(test) >= n_split or max(dev) >= n_split:
        raise ConfigError(f"BenchConfig: dev {cfg.dev} / test {cfg.test} exceed the {n_split} questions of "
                          f"split '{runner.env_config.split}'")
    known = set(scalar_signals()) | set(runner_probe_names(cfg))
    for m in cfg.methods:  # typos and missing policies are errors now, not after every other method ran
        m.preflight(known, cfg.skip_missing_policies)
    for m in cfg.methods:  # so is a saved object that does not fit the env it runs in (a policy's fields, sizes)
        m.check_loaded(runner)
    log.info("bench %s: dev %s, test %s, λ = %g, %d methods", cfg.name, cfg.dev, cfg.test, cfg.lambda_retrieval,
             len(cfg.methods))
    ctx = RunContext(runner, runner.run(NeverTrigger(), "dev", dev, tag="CoT"), dev, test, {}, {},
                     cfg.lambda_retrieval)
    if cfg.workers > 1 and components is None:  # helpers fill the per-question files; the pass below reads them
        from eval.bench import parallel

        helpers = parallel.start_helpers(cfg, cfg.methods)
        try:
            parallel.run_claimed(ctx, parallel.shareable(cfg.methods), cfg.out_dir, "bench")
        except BaseException:  # Ctrl-C or a crash: the helpers stop too (a rerun resumes from the files)
            parallel.stop_helpers(helpers, cfg.out_dir)
            raise
        parallel.join_helpers(helpers, cfg.out_dir)
        ctx.results.clear()
        ctx.calib.clear()
    elif cfg.workers > 1:
        log.info("bench %s: workers %d ignored (components passed in: helper processes could not rebuild them)",
                 cfg.name, cfg.workers)
    skipped: dict[str, str] = {}
    for m in sorted(cfg.methods, key=lambda m: m.runs_last):  # Random matches others: it runs last
        try:
            ctx.results[m.name] = m.run(ctx)
        except Skip as e:
            skipped[m.name] = str(e)
            log.warning("skipping %s: %s", m.name, e)
    summary = summarize(cfg, runner, ctx.results, ctx.calib, skipped)
    paths = write_report(summary, cfg.out_dir)
    log.info("report: %s", paths["html"])
    return summary


def evaluated_policy(out_dir: str | Path, method: str, config: str | Path | None = None):
    """What the benchmark at ``out_dir`` evaluated on test for ``method``: ``(env config, trigger, batch size)`` —
    the snapshot ``select_on_dev`` chose, the threshold and query mode calibrated on dev, as ``summary.json``
    records them, in the env the method ran in (the bench env with its overrides and λ). Running the trigger
    in that env config (``kairos.Pipeline.from_bench``) repeats the benchmark's decisions.

    Args:
        out_dir: the benchmark's output directory (``summary.json``, and ``config.json``, which ``run_bench``
            writes).
        method: a method name of the benchmark.
        config: the benchmark's YAML, for an output directory written before ``config.json`` was.

    Raises:
        FileNotFoundError: no finished benchmark at ``out_dir``, or no config (naming what to pass).
        ValueError: an unknown or skipped method, or one an application cannot run (Random, the oracles).
    """
    out = Path(out_dir)
    if not (out / "summary.json").is_file() and (out / "budgets.json").is_file():
        lams = json.loads((out / "budgets.json").read_text()).get("lambdas") or []
        raise FileNotFoundError(f"{out} holds a benchmark at every budget: name one λ's folder, e.g. "
                                f"{out / f'lambda={lams[0]:g}' if lams else out / 'lambda=0.1'} (λ: "
                                f"{', '.join(f'{x:g}' for x in lams)})")
    if not (out / "summary.json").is_file():
        raise FileNotFoundError(f"no finished benchmark at {out} (summary.json missing); run `kairos bench policies "
                                f"--config …` (or `kairos quickstart`, whose benchmark is runs/quickstart/bench)")
    if config is not None:
        cfg = BenchConfig.from_dict(read_yaml_mapping(config), where=str(config))
    elif (out / "config.json").is_file():
        cfg = load_record(json.loads((out / "config.json").read_text()), where=str(out / "config.json"))
    else:
        raise FileNotFoundError(f"{out}: the benchmark records no config.json (written before it was recorded); pass "
                                "the benchmark's YAML (config=…, `--bench-config`), e.g. configs/bench_microworld.yaml")
    summary = json.loads((out / "summary.json").read_text())
    specs = {m.name: m for m in cfg.methods}
    if method not in specs:
        raise ValueError(f"benchmark {out}: no method '{method}' (methods: {', '.join(specs)})")
    if method in summary.get("skipped", {}):
        raise ValueError(f"benchmark {out}: method '{method}' was skipped ({summary['skipped'][method]})")
    if method not in summary.get("methods", {}):
        raise ValueError(f"benchmark {out}: method '{method}' has no results in summary.json")
    m = specs[method]
    env_config, trigger, mode, querygen = m.replay(bench_env_config(cfg, m),  # as the Runner builds it
                                                   summary.get("calibration", {}).get(method, {}))
    env_config, trigger = evaluated_setup(env_config, trigger, mode, querygen)
    return env_config, trigger, cfg.batch_size


# ---------------------------------------------------------------- CLI
#: what Ctrl-C during a benchmark prints (per-question results are on disk: a rerun skips them)
INTERRUPTED = "interrupted — rerun the same command to resume (finished questions are kept)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("policies", help="learned vs calibrated fixed triggers and baselines (report + plots)")
    p.add_argument("--config", required=True, help="BenchConfig YAML (e.g. configs/bench_microworld.yaml)")
    p.add_argument("--out", default=None, help="override out_dir")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="override keys, e.g. test=100:200 n_resamples=2000 env.answer_closing=false")
    p.set_defaults(func=main, interrupted=INTERRUPTED)


def main(args) -> int:
    import torch

    torch.set_num_threads(1)
    cfg = load_config(args.config, args.out, args.set)
    summary = run_bench(cfg)
    rows = [f"{'method':<26} {'acc':>6} {'CI':>15} {'calls':>6} {'reward':>7}"]
    for k, v in summary["methods"].items():
        rows.append(f"{k:<26} {v['accuracy']:6.3f} [{v['acc_lo']:.3f},{v['acc_hi']:.3f}] {v['calls']:6.2f} "
                    f"{v['reward']:7.3f}")
    print("\n".join(rows))
    print(f"report: {Path(cfg.out_dir).resolve() / 'report.html'}")
    return 0 if not math.isnan(next(iter(summary["methods"].values()))["accuracy"]) else 1
