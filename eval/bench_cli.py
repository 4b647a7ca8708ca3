"""``kairos bench``: performance and quality benchmarks, one subcommand each.

Each entry of the :data:`BENCHES` registry is a ``register(subparsers)`` that adds the benchmark's own parser and
sets ``func``. Add one with ``BENCHES.register_path("name", "package.module:register")``; modules are imported
when the CLI starts and keep their heavy imports inside the command functions.

Every benchmark prints a table to stdout and writes JSON (docs/design.md §9).
"""

from __future__ import annotations

import sys
from typing import Any

from envs.core.registry import Registry, RegistryImportError

#: benchmark name -> its ``register(subparsers)`` (imported on use: a benchmark's heavy imports stay its own)
BENCHES: Registry[Any] = Registry("benchmark")
for _name, _mod in (("retrieval", "perf.retrieval"), ("env", "perf.env"), ("detection", "detection.bench"),
                    ("policies", "bench.policies"), ("querygen", "perf.querygen"), ("segmenter", "perf.segmenter"),
                    ("rsus", "perf.rsus"), ("suite", "bench.suite"), ("service", "perf.service"),
                    ("efficiency", "perf.efficiency"), ("engine", "perf.engine"), ("drift", "perf.drift"),
                    ("scaling", "perf.scaling"), ("projection", "perf.projection")):
    BENCHES.register_path(_name, f"eval.{_mod}:register")
# the application layer's benchmark (kairos sits on top of eval: named by path, never imported here)
BENCHES.register_path("serve", "kairos.serve_bench:register")


def register(subparsers: Any) -> None:
    """Add ``kairos bench`` with one subcommand per entry of :data:`BENCHES`."""
    p = subparsers.add_parser("bench", help="benchmarks (print a table, write JSON)")
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    p.set_defaults(func=lambda a: p.print_help(sys.stderr) or 2)
    for name in BENCHES.names():
        try:
            reg = BENCHES.get(name)
        except RegistryImportError as e:
            bsub.add_parser(name, help=f"(unavailable: {e})")
            continue
        reg(bsub)
        sp = bsub.choices.get(name)
        if sp is not None and callable(sp.get_default("func")):
            sp.set_defaults(func=_locked(sp.get_default("func")))


def _locked(func: Any) -> Any:
    """A benchmark's command holding the lock of its output folder (``--out``, when it names a folder rather than a
    ``.json`` file): a second benchmark into the same folder refuses at once, naming this one
    (:class:`envs.core.runlock.FolderLock`; ``kairos bench policies`` also locks a config's ``out_dir``)."""
    def run(args: Any) -> Any:
        out = getattr(args, "out", None)
        if not out or str(out).endswith((".json", ".jsonl")):
            return func(args)
        from envs.core.runlock import FolderLock

        with FolderLock(out):
            return func(args)

    return run
