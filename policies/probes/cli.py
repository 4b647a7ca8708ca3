"""``kairos probe train``: train a step-error probe (PUlSE, ReProbe, RSUS proxy) on the micro-world."""

from __future__ import annotations

import argparse
import json
import logging

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    from policies.probes.pipeline import ProbeTrainConfig

    p = sub.add_parser("probe", help="train and inspect step-error probes (PUlSE, ReProbe, RSUS proxy)")
    psub = p.add_subparsers(dest="probe_command", metavar="ACTION")
    t = psub.add_parser("train", help="label micro-world steps, train a probe, save it, print validation metrics")
    t.add_argument("--config", help="YAML with ProbeTrainConfig keys (flags override it)")
    t.add_argument("--json", action="store_true", help="print the metrics as JSON instead of tables")
    ProbeTrainConfig.add_cli_args(t)
    t.set_defaults(func=_train)
    i = psub.add_parser("info", help="print a saved probe's metadata (without normalisation statistics)")
    i.add_argument("path", help="probe directory")
    i.set_defaults(func=_info)
    p.set_defaults(func=lambda a: p.print_help() or 2)


def _train(args) -> int:
    from policies.probes.pipeline import ProbeTrainConfig, format_report, train_probe

    base = ProbeTrainConfig.from_yaml(args.config).to_dict() if args.config else {}
    cfg = ProbeTrainConfig.from_dict({**base, **ProbeTrainConfig.cli_overrides(args)})
    if not cfg.out:
        raise ValueError("--out is required (directory to save the probe in)")
    _, report = train_probe(cfg)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _info(args) -> int:
    from pathlib import Path

    meta_path = Path(args.path) / "probe.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"no probe at {args.path} (missing probe.json)")
    meta = json.loads(meta_path.read_text())
    meta.pop("normalization", None)
    print(json.dumps(meta, indent=2))
    return 0
