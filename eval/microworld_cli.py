"""``kairos microworld build | eval | info``."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("microworld", help="build, evaluate and inspect the micro-world testbed")
    msub = p.add_subparsers(dest="mw_command", metavar="ACTION")

    b = msub.add_parser("build", help="generate the world and train its LM (deterministic)")
    b.add_argument("--config", help="YAML with world/model/train sections (default: built-in defaults)")
    b.add_argument("--out", required=True, help="artifact directory to write")
    b.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt after a crash")
    b.add_argument("--overwrite", action="store_true", help="rebuild into an OUT that already holds an artifact")
    b.add_argument("--max-steps", type=int, default=None, help="stop after N optimiser steps (smoke tests)")
    b.add_argument("--no-eval", action="store_true", help="skip the competence evaluation after training")
    b.set_defaults(func=_build)

    e = msub.add_parser("eval", help="competence metrics and generation throughput of an artifact")
    e.add_argument("--artifact", default=None, help="artifact directory (default: the shipped one)")
    e.add_argument("--split", default="test", help="question split to evaluate (dev | test)")
    e.add_argument("--n", type=int, default=400, help="questions per measurement")
    e.add_argument("--out", default=None, help="write the metrics JSON here (default: print only)")
    e.add_argument("--no-throughput", action="store_true", help="skip the generation-throughput benchmark")
    e.set_defaults(func=_eval)

    i = msub.add_parser("info", help="print an artifact's manifest and stored metrics")
    i.add_argument("--artifact", default=None, help="artifact directory (default: the shipped one)")
    i.set_defaults(func=_info)
    p.set_defaults(func=lambda a: p.print_help() or 2)


def _build(args) -> int:
    from envs.core.microworld.config import BuildConfig
    from envs.core.runlock import FolderLock

    cfg = BuildConfig.from_yaml(args.config) if args.config else BuildConfig()  # a bad config fails first
    with FolderLock(args.out):  # one build per artifact folder (check, train, evaluate, save): a second refuses
        return _build_locked(args, cfg)


def _build_locked(args, cfg) -> int:
    from envs.microworld.build import train_world

    out = Path(args.out)
    if (out / "manifest.json").is_file() and not (args.resume or args.overwrite):
        raise FileExistsError(f"{out} already holds a micro-world artifact; pass --overwrite to rebuild it in place "
                              "(or --resume to continue an interrupted build)")
    world = train_world(cfg, args.out, resume=args.resume, max_steps=args.max_steps)
    if not args.no_eval:
        from envs.core.microworld.artifact import save_artifact
        from eval.microworld import evaluate_world

        metrics = evaluate_world(world, split="test", n=400, throughput=False)
        save_artifact(world, args.out, metrics=metrics)
    log.info("artifact written to %s", Path(args.out).resolve())
    return 0


def _eval(args) -> int:
    from envs.core.io import write_json
    from envs.core.microworld.artifact import load_artifact
    from eval.microworld import evaluate_world, format_metrics

    world = load_artifact(args.artifact)
    metrics = evaluate_world(world, split=args.split, n=args.n, throughput=not args.no_throughput)
    print(format_metrics(metrics))
    if args.out:
        write_json(args.out, metrics)
        log.info("metrics written to %s", args.out)
    return 0


def _info(args) -> int:
    from envs.core.microworld.artifact import default_artifact_path, verify_artifact

    path = Path(args.artifact) if args.artifact else default_artifact_path()
    manifest = verify_artifact(path)  # a corrupt or edited artifact is an error, never printed as if it were fine
    print(json.dumps(manifest, indent=2))
    print(f"verified: {len(manifest.get('files', {}))} files match their SHA-256 ({path})")
    if (path / "metrics.json").is_file():
        print(json.dumps(json.loads((path / "metrics.json").read_text()), indent=2))
    return 0
