"""A benchmark on several CPUs (``BenchConfig.workers``): helper processes fill the per-question files.

Every method's runs (its dev sweep, its test run, a learned row's snapshots on dev) are written row by row to
``<out_dir>/per_question/<split>/<run>.jsonl``, and a run that finds its file complete reads it back instead of
generating (that is how a benchmark resumes after a crash). So the benchmark parallelises without changing what it
computes: ``workers - 1`` helper processes and the benchmark itself walk the methods in the config's order, each
*claiming* a method before running it (an exclusive file under ``<out_dir>/per_question/.claims/``, so no method
runs in two processes and no file has two writers); when the helpers are done, the benchmark runs every method in
order as before — a method a helper ran is read back from its files. The rows are those of a one-process run:
greedy generation is deterministic, and each run is identified by its file name, not by the process that wrote it.
The trajectory cache is shared (SQLite, WAL: writers take turns). A method a helper could not run (an error, a
skip) is simply run by the benchmark afterwards, which reports it as it would have. Methods that read other
methods' results (``runs_last``: Random matching a calibrated trigger) are never handed to a helper.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eval.bench.config import BenchConfig
    from eval.bench.methods import MethodSpec, RunContext

log = logging.getLogger(__name__)

CLAIMS = ".claims"


def claims_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "per_question" / CLAIMS


def claim(out_dir: str | Path, name: str) -> bool:
    """Claim method ``name`` for this process: True once per benchmark run, for the first process that asks."""
    import hashlib

    d = claims_dir(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / hashlib.sha1(name.encode()).hexdigest()[:16]
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, name.encode())
    os.close(fd)
    return True


def shareable(methods: list[MethodSpec]) -> list[MethodSpec]:
    """The methods a helper may run: all but those that read other methods' results."""
    return [m for m in methods if not m.runs_last]


def run_claimed(ctx: RunContext, methods: list[MethodSpec], out_dir: str | Path, who: str) -> list[str]:
    """Run each method of ``methods`` this process claims (results discarded: the files are what counts)."""
    from eval.bench.methods import Skip

    ran = []
    for m in methods:
        if not claim(out_dir, m.name):
            continue
        try:
            m.run(ctx)
            ran.append(m.name)
        except Skip:  # the benchmark itself skips it again, saying why
            pass
        except Exception as e:  # noqa: BLE001 — the benchmark reruns it and reports the error itself
            log.warning("%s: %s failed (%s: %s); the benchmark runs it itself", who, m.name, type(e).__name__, e)
    return ran


def _helper(record: dict, where: str, names: list[str], index: int) -> None:
    """A helper process: rebuild the benchmark from its record, claim and run what is left."""
    import torch

    from eval.bench.config import load_record, parse_slice
    from eval.bench.methods import RunContext
    from eval.bench.runner import Runner
    from policies.triggers import NeverTrigger

    torch.set_num_threads(1)
    cfg = load_record(record, where)
    dev, test = parse_slice(cfg.dev, "dev"), parse_slice(cfg.test, "test")
    runner = Runner(cfg)
    ctx = RunContext(runner, runner.run(NeverTrigger(), "dev", dev, tag="CoT"), dev, test, {}, {},
                     cfg.lambda_retrieval)
    methods = [m for m in cfg.methods if m.name in names]
    ran = run_claimed(ctx, methods, cfg.out_dir, f"bench helper {index}")
    log.info("bench helper %d ran %d methods: %s", index, len(ran), ", ".join(ran))


def start_helpers(cfg: BenchConfig, methods: list[MethodSpec]) -> list[mp.Process]:
    """Start ``cfg.workers - 1`` helper processes on ``methods`` (the claims of an earlier run removed first).
    Call after the benchmark's own CoT dev run is written (every helper reads it)."""
    shutil.rmtree(claims_dir(cfg.out_dir), ignore_errors=True)
    names = [m.name for m in shareable(methods)]
    if cfg.workers <= 1 or not names:
        return []
    ctx = mp.get_context("spawn")  # a fresh interpreter: no torch / SQLite state inherited
    procs = [ctx.Process(target=_helper, args=(cfg.to_dict(), f"{cfg.out_dir}/config.json", names, i + 1),
                         name=f"kairos-bench-helper-{i + 1}") for i in range(cfg.workers - 1)]
    # not daemonic: a helper may start processes of its own (vLLM's engine core); stop_helpers ends them on error
    for p in procs:
        p.start()
    log.info("bench %s: %d helper process(es) share the methods (workers: %d)", cfg.name, len(procs), cfg.workers)
    return procs


def join_helpers(procs: list[mp.Process], out_dir: str | Path) -> None:
    """Wait for the helpers; a helper that died is only logged (its unfinished methods run in the benchmark)."""
    for p in procs:
        p.join()
        if p.exitcode:
            log.warning("%s exited with code %s; the benchmark runs what it left", p.name, p.exitcode)
    shutil.rmtree(claims_dir(out_dir), ignore_errors=True)


def stop_helpers(procs: list[mp.Process], out_dir: str | Path) -> None:
    """End the helpers now (the benchmark itself failed or was interrupted); their finished rows stay on disk."""
    for p in procs:
        if p.is_alive():
            p.terminate()
        p.join(timeout=30)
    shutil.rmtree(claims_dir(out_dir), ignore_errors=True)
