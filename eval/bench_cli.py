"""``kairos bench``: performance and quality benchmarks, one subcommand each.

Each entry of :data:`BENCHES` is ``"module:register"``; ``register(subparsers)`` adds the benchmark's own
parser and sets ``func``. Add a benchmark by adding an entry; modules are imported when the CLI starts and
keep their heavy imports inside the command functions.

Every benchmark prints a table to stdout and writes JSON (DESIGN §9).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

#: benchmark name -> "module:register_function"
BENCHES: dict[str, str] = {
    "retrieval": "eval.retrieval_bench:register",
    "env": "eval.env_bench:register",
    "detection": "eval.detection_bench:register",
    "policies": "eval.bench_policies:register",
    "querygen": "eval.querygen_bench:register",
    "segmenter": "eval.segmenter_bench:register",
    "rsus": "eval.rsus_bench:register",
}


def register(subparsers: Any) -> None:
    """Add ``kairos bench`` with one subcommand per entry of :data:`BENCHES`."""
    p = subparsers.add_parser("bench", help="benchmarks (print a table, write JSON)")
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    p.set_defaults(func=lambda a: p.print_help(sys.stderr) or 2)
    for name, spec in BENCHES.items():
        mod, fn = spec.split(":")
        try:
            reg = getattr(importlib.import_module(mod), fn)
        except ModuleNotFoundError as e:
            bsub.add_parser(name, help=f"(unavailable: {e})")
            continue
        reg(bsub)
