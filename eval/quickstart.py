"""``kairos quickstart``: the README's main job on the embedded default (the micro-world).

Today it loads the shipped micro-world, measures its competence and throughput, runs the fixed retrieval
triggers (and the label oracle) through the environment on dev questions, and writes a report. Training a
learned policy into this job comes with the benchmark harness (issue 8).
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
    p.add_argument("--n", type=int, default=400, help="test questions for the competence evaluation")
    p.add_argument("--n-dev", type=int, default=100, help="dev questions for the trigger comparison")
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
    triggers = compare_triggers(args.artifact, args.n_dev)
    write_json(out / "triggers.json", triggers)
    table = ["| trigger | accuracy | calls / question | reward (λ = 0.1) |", "|---|---|---|---|"]
    for name, r in triggers.items():
        table.append(f"| {name} | {r['accuracy']:.3f} | {r['calls_per_question']:.2f} | {r['reward']:.3f} |")
    text += f"\nFixed triggers through the env ({args.n_dev} dev questions):\n" + "\n".join(table) + "\n"
    write_text(out / "report.md", "# Kairos quickstart: micro-world\n\n```\n" + text + "```\n")
    print(text)
    log.info("report written to %s", (out / "report.md").resolve())
    return 0


def compare_triggers(artifact: str | None, n_dev: int) -> dict[str, dict[str, float]]:
    """Never / always / Single RAG / FLARE / RSUS / oracle through the env on the first ``n_dev`` dev questions."""
    from envs.components import build_components
    from envs.env_config import EnvConfig
    from policies.triggers import AlwaysTrigger, NeverTrigger, OracleTrigger, SingleTrigger, ThresholdTrigger
    from train.evaluate import evaluate_policy

    cfg = EnvConfig(artifact=artifact, split="dev", rsus_components=["ent"], costs={"retrieval_calls": 0.1})
    comps = build_components(cfg)
    n = min(n_dev, len(comps.questions))
    out = {}
    for trig in [NeverTrigger(), AlwaysTrigger(), SingleTrigger(),
                 ThresholdTrigger("minprob", 0.9, "below", name="FLARE(minprob<0.9)"),
                 ThresholdTrigger("rsus", 0.65, "above", name="RSUS(>0.65)"), OracleTrigger()]:
        r = evaluate_policy(trig, cfg, list(range(n)), components=comps)
        out[trig.name] = {k: float(r[k]) for k in ("accuracy", "calls_per_question", "reward")}
        log.info("%s: %s", trig.describe(), out[trig.name])
    return out
