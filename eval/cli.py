"""The ``kairos`` command line: one entry point, subcommands registered by the packages that own them.

Each entry of the :data:`COMMANDS` registry is a ``register(subparsers)`` named by dotted path; it adds its own
parser (setting ``func``). Modules are imported only when the CLI starts, and they keep heavy
imports (torch, ray, transformers) inside the command functions, so ``kairos --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys

from envs.core.registry import Registry, RegistryImportError

#: subcommand name -> its ``register(subparsers)``, imported when the CLI starts
COMMANDS: Registry = Registry("command")
for _name, _path in (("data", "eval.data_cli:register"), ("microworld", "eval.microworld_cli:register"),
                     ("quickstart", "eval.quickstart:register"), ("probe", "policies.probes.cli:register"),
                     ("index", "agents.retrievers.cli:register_index"),
                     ("retriever", "agents.retrievers.cli:register_retriever"), ("bench", "eval.bench_cli:register"),
                     ("train", "train.cli:register"), ("answer", "kairos.cli:register"),
                     ("config", "eval.config_cli:register"), ("results", "eval.results_cli:register"),
                     ("serve", "kairos.server:register")):
    COMMANDS.register_path(_name, _path)


def build_parser() -> argparse.ArgumentParser:
    """The full ``kairos`` argument parser."""
    parser = argparse.ArgumentParser(prog="kairos", description="Kairos: learning when to retrieve.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS.names():
        try:
            register = COMMANDS.get(name)
        except RegistryImportError as e:  # a command whose package is not built yet is shown as missing
            sub.add_parser(name, help=f"(unavailable: {e})")
            continue
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    from envs.core.cli_errors import INTERRUPTED, run_handled

    # one handler for every command (envs.core.cli_errors): one error line, 130 on Ctrl-C (a command's own hint)
    return run_handled(f"kairos {args.command}", lambda: func(args), getattr(args, "interrupted", INTERRUPTED))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
