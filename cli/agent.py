"""``topos agent``: the node agent (docs/design.md §8); the same program as ``topos-agent``."""

from __future__ import annotations

import argparse

from agent.app import run_from_args
from agent.settings import AgentError, add_arguments
from cli.errors import CliError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="the node agent: publish this node's GPUs as labels and stream them",
        description=(
            "Discover this node's GPUs (NVML, or a profile's fake NVML), publish labels and "
            "annotations on its Node, serve /healthz, /readyz and /metrics, and stream capacity "
            "to the coordinator when --coordinator is given."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        return run_from_args(args)
    except AgentError as exc:
        raise CliError(str(exc)) from None
