"""``kairos quickstart``: the README's main job on the embedded default (the micro-world).

Today it loads the shipped micro-world, measures its competence and throughput, and writes a report.
As the environment, training and benchmark land it grows into "train a retrieval policy on the
micro-world, benchmark it against fixed thresholds, write the report".
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="the main job on the embedded micro-world (writes a report)")
    p.add_argument("--out", default="runs/quickstart", help="output directory")
    p.add_argument("--artifact", default=None, help="micro-world artifact (default: the shipped one)")
    p.add_argument("--n", type=int, default=400, help="test questions to evaluate")
    p.set_defaults(func=run)


def run(args) -> int:
    from envs.io import write_json, write_text
    from envs.microworld.artifact import load_artifact
    from eval.microworld import evaluate_world, format_metrics

    out = Path(args.out)
    world = load_artifact(args.artifact)
    log.info("loaded micro-world %s (%d facts)", world.path, len(world.kb.facts))
    metrics = evaluate_world(world, split="test", n=args.n, throughput=True)
    text = format_metrics(metrics)
    write_json(out / "microworld_eval.json", metrics)
    write_text(out / "report.md", "# Kairos quickstart: micro-world\n\n```\n" + text + "```\n")
    print(text)
    log.info("report written to %s", (out / "report.md").resolve())
    return 0
