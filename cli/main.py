"""``topos``: the umbrella command line (docs/design.md §8).

Each sub-command lives in its own module under ``cli/`` exposing ``register(subparsers)``; the
module registers its parser and sets ``func`` (sync, returning an exit status). Errors meant for
the user are raised as ``CliError`` and printed as one line; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from cli.errors import CliError

# One entry per sub-command module, in help order.
COMMAND_MODULES: tuple[str, ...] = (
    "cli.demo",
    "cli.discover",
    "cli.profile",
    "cli.agent",
    "cli.coordinator",
    "cli.devcluster",
    "cli.simulate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topos", description="Topology-aware GPU scheduling for Kubernetes."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # sub-command not built yet
                continue
            raise
        register: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None] = (
            module.register
        )
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return func(args)
    except CliError as exc:
        if args.debug:
            raise
        print(f"topos: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
