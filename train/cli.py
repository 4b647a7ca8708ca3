"""``kairos train`` / ``python -m train``: train a retrieval-timing policy with REINFORCE on RLlib.

Examples:
    python -m train --config configs/experiments/microworld/train_microworld.yaml
    python -m train --config configs/experiments/microworld/train_microworld.yaml --resume      # continue after a crash / kill
    python -m train --config configs/experiments/microworld/train_microworld.yaml --sweep       # Tune grid: sweep.seeds × sweep.lambda_end
    kairos train querygen --config configs/querygen_microworld.yaml      # the generative QueryGen (TRL)
    kairos train rsus-weights --config configs/rsus_weights_microworld.yaml   # refit RSUS's weights, save by name
    ray job submit --working-dir . -- python -m train --config configs/experiments/microworld/train_microworld.yaml
"""

from __future__ import annotations

import argparse
import json
import logging

#: what Ctrl-C during training prints (the run's checkpoints are kept)
INTERRUPTED = "interrupted — rerun with --resume to continue from the last checkpoint"
#: what the final ``done:`` log line reports of a run's summary (every path of ``train.run.train`` writes them)
DONE_KEYS = ("iteration", "wall_seconds", "driver_peak_rss_mb", "policy_dir")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from train.config import TrainConfig

    p.add_argument("what", nargs="?", choices=("policy", "querygen", "rsus-weights"), default="policy",
                   help="policy: the retrieval-timing policy (RLlib, default); querygen: the generative "
                        "QueryGen (TRL SFT + RLOO/GRPO; --config is a QueryGenTrainConfig, other options unused); "
                        "rsus-weights: refit the RSUS weights on a validation split and save them by name "
                        "(--config is an RSUSFitConfig)")
    p.add_argument("--config", help="YAML file with TrainConfig fields (unknown keys are an error)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in out_dir")
    p.add_argument("--stop-after", type=int, default=None, help="stop after N iterations of this invocation")
    p.add_argument("--no-progress", action="store_true", help="no rich progress bar (log lines only)")
    p.add_argument("--sweep", dest="run_sweep", action="store_true",
                   help="run the config's sweep grid (seeds × final λ) through Ray Tune instead of one run")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="override config keys, as `kairos bench policies --set` does: e.g. iterations=3 "
                        "algo.lr=0.001 env_config.max_steps=6 (a dotted key sets a key of a nested mapping)")
    TrainConfig.add_cli_args(p)
    p.set_defaults(interrupted=INTERRUPTED)


def run_querygen(args: argparse.Namespace) -> int:
    """``kairos train querygen``: data → SFT → RL (resumes: finished stages are skipped)."""
    from policies.querygen.config import QueryGenTrainConfig
    from policies.querygen.train import train_querygen

    if not args.config:
        raise ValueError("train querygen needs --config (e.g. configs/querygen_microworld.yaml)")
    cfg = QueryGenTrainConfig.from_yaml(args.config)
    summary = train_querygen(cfg, progress=not args.no_progress)
    logging.getLogger("kairos.train").info("querygen done: %s", json.dumps(
        {k: {kk: vv for kk, vv in v.items() if kk != "log_history"} if isinstance(v, dict) else v
         for k, v in summary.items()}, default=str))
    return 0


def run_rsus_weights(args: argparse.Namespace) -> int:
    """``kairos train rsus-weights``: fit RSUS weights on counterfactual retrieval benefits, save them by name."""
    from train.rsus_fit import RSUSFitConfig, fit_rsus

    cfg = RSUSFitConfig.from_yaml(args.config) if args.config else RSUSFitConfig()
    out = fit_rsus(cfg, progress=not args.no_progress)
    print(json.dumps({k: out[k] for k in ("name", "weights", "correlation", "paper_correlation", "path")}))
    return 0


def train_config(args: argparse.Namespace):
    """The :class:`TrainConfig` of ``--config`` (default: every default), the flags and the ``--set`` overrides."""
    from envs.core.config import from_dict_with_sets, read_yaml_mapping
    from train.config import TrainConfig

    raw = read_yaml_mapping(args.config) if args.config else {}
    raw.update(TrainConfig.cli_overrides(args))
    return from_dict_with_sets(TrainConfig, raw, getattr(args, "set", None) or [], args.config or "python -m train")


def run(args: argparse.Namespace) -> int:
    what = getattr(args, "what", "policy")
    if what != "policy" and getattr(args, "set", None):
        raise ValueError(f"--set overrides the policy's TrainConfig; for `train {what}` edit its --config YAML")
    if what == "querygen":
        return run_querygen(args)
    if what == "rsus-weights":
        return run_rsus_weights(args)
    from train.run import train

    cfg = train_config(args)
    if args.run_sweep:
        from train.sweep import sweep

        out = sweep(cfg)
        logging.getLogger("kairos.train").info("sweep done: %d trials, Tune logs (TensorBoard) in %s",
                                               len(out["trials"]), out["tune_dir"])
        return 0
    summary = train(cfg, resume=args.resume, stop_after=args.stop_after, show_progress=not args.no_progress)
    logging.getLogger("kairos.train").info("done: %s", json.dumps(
        {k: summary[k] for k in DONE_KEYS}))
    return 0


def register(sub) -> None:
    """Add the ``train`` subcommand to the ``kairos`` CLI."""
    p = sub.add_parser("train", help="train a retrieval-timing policy (REINFORCE on RLlib)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    from envs.core.cli_errors import run_handled

    return run_handled("python -m train", lambda: run(args), args.interrupted)
