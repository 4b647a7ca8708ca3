"""Ray Tune sweeps over seeds and the final λ (``python -m train --config … --sweep``).

Each trial is one :func:`train.run.train` run in its own directory (``<out_dir>/sweep/seed{S}_lam{λ}``,
resumable like any run); it reports every iteration's metrics to Tune, whose default loggers write
TensorBoard events, ``progress.csv`` and ``result.json`` under ``<out_dir>/tune/``. A trial holds one CPU and
its EnvRunners one bundle each (a placement group per trial), so on 2 CPUs trials run one at a time
(``sweep.max_concurrent``).

Example:
    >>> from train.config import TrainConfig
    >>> cfg = TrainConfig.from_dict({"sweep": {"seeds": [0, 1], "lambda_end": [0.05, 0.1]}})
    >>> [(c["seed"], c["curriculum"]["retrieval_calls"]["end"]) for c in trial_configs(cfg)]
    [(0, 0.05), (0, 0.1), (1, 0.05), (1, 0.1)]
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from envs.core.io import write_json
from train.config import TrainConfig

log = logging.getLogger(__name__)


def trial_configs(cfg: TrainConfig) -> list[dict[str, Any]]:
    """One TrainConfig dict per (seed, final λ) of the grid, each with its own out_dir."""
    seeds = cfg.sweep.seeds or [cfg.seed]
    default_end = cfg.curriculum["retrieval_calls"].end if "retrieval_calls" in cfg.curriculum else None
    lams = cfg.sweep.lambda_end or [default_end]
    out = []
    for s in seeds:
        for lam in lams:
            d = cfg.to_dict()
            d["seed"] = s
            if lam is not None:
                if "retrieval_calls" not in d["curriculum"]:
                    raise ValueError("sweep.lambda_end needs a 'retrieval_calls' schedule in curriculum")
                d["curriculum"]["retrieval_calls"]["end"] = float(lam)
            d["name"] = f"{cfg.name}_seed{s}" + (f"_lam{lam:g}" if lam is not None else "")
            d["out_dir"] = str(Path(cfg.out_dir).resolve() / "sweep" / d["name"])
            d["sweep"] = {}
            out.append(d)
    return out


def _trial(config: dict[str, Any]) -> None:
    """The Tune trainable: one resumable training run reporting each iteration."""
    from ray import tune

    from train.run import train

    cfg = TrainConfig.from_dict(config["train"])
    train(cfg, resume=True, show_progress=False, on_iteration=lambda it, m: tune.report({**m, "iteration": it}))


def sweep(cfg: TrainConfig) -> dict[str, Any]:
    """Run the grid through ``tune.Tuner``; returns (and writes ``<out_dir>/sweep_summary.json``) each
    trial's final metrics and exported policy directory. Holds ``out_dir``'s lock (a second sweep or run there
    refuses, naming this one; each trial locks its own folder)."""
    from envs.core.runlock import FolderLock

    with FolderLock(cfg.out_dir):
        return _sweep(cfg)


def _sweep(cfg: TrainConfig) -> dict[str, Any]:
    import ray
    from ray import tune

    from train.cluster import init_ray

    started = init_ray(cfg)
    trials = trial_configs(cfg)
    try:
        # the trial's driver (learner) bundle + one bundle per EnvRunner, which RLlib places into the trial's
        # placement group (a plain {"cpu": 1} trial gives the runners no bundle to land in)
        runner = {"CPU": 1, **({"GPU": cfg.num_gpus_per_env_runner} if cfg.num_gpus_per_env_runner else {})}
        pgf = tune.PlacementGroupFactory([{"CPU": 1}] + [dict(runner) for _ in range(cfg.num_env_runners)])
        tuner = tune.Tuner(
            tune.with_resources(_trial, pgf),
            param_space={"train": tune.grid_search(trials)},
            tune_config=tune.TuneConfig(max_concurrent_trials=cfg.sweep.max_concurrent),
            run_config=tune.RunConfig(name=f"{cfg.name}_sweep_{time.strftime('%Y%m%d-%H%M%S')}",
                                      storage_path=str(Path(cfg.out_dir).resolve() / "tune"), verbose=1),
        )
        grid = tuner.fit()
    finally:
        if started:
            ray.shutdown()
    rows = []
    for res in grid:
        t = res.config["train"]
        rows.append({"name": t["name"], "seed": t["seed"], "lambda_end": t["curriculum"].get(
            "retrieval_calls", {}).get("end"), "out_dir": t["out_dir"],
            "policy_trigger": str(Path(t["out_dir"]) / "policy_trigger"),
            "error": str(res.error) if res.error else None,
            "final": {k: v for k, v in (res.metrics or {}).items() if isinstance(v, (int, float))}})
    summary = {"trials": rows, "tune_dir": str(Path(cfg.out_dir).resolve() / "tune")}
    write_json(Path(cfg.out_dir) / "sweep_summary.json", summary)
    failed = [r["name"] for r in rows if r["error"]]
    if failed:
        raise RuntimeError(f"sweep: trial(s) failed: {failed} (see {summary['tune_dir']})")
    return summary
