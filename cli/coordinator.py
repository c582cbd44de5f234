"""``topos coordinator [--kubeconfig K] [--listen HOST:PORT] [--config F] [--in-memory]``."""

from __future__ import annotations

import argparse

from cli.errors import CliError
from coordinator.app.config.load import ConfigError
from coordinator.app.main import add_arguments, run_from_args


def _run(args: argparse.Namespace) -> int:
    try:
        return run_from_args(args)
    except ConfigError as exc:
        raise CliError(str(exc), exit_code=2) from exc


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "coordinator",
        help="run the coordinator (inventory, agent streams, HTTP API)",
        description="Run the Topos coordinator: the authoritative GPU inventory fed by agent "
        "streams and the API server, and its HTTP API.",
    )
    add_arguments(parser)
    parser.set_defaults(func=_run)
