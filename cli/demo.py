"""``topos demo``: the embedded demo (DESIGN.md §7).

Placeholder until the full demo lands: prints the simulated inventory of one built-in profile,
so ``make demo`` is runnable at every step.
"""

from __future__ import annotations

import argparse
import sys

from agent.devices.matrix_format import format_inventory
from agent.devices.source import discover_profile


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the embedded demo (no cluster needed)",
        description="The embedded demo: simulated GPU nodes from hardware profiles.",
    )
    parser.add_argument("--profile", default="dgx-h100", help="built-in profile to show")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    topology = discover_profile(args.profile, hostname=f"demo-{args.profile}")
    sys.stdout.write(format_inventory(topology))
    return 0
