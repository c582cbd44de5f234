"""``topos discover``: this node's hardware (real NVML) or a profile's: table, JSON or matrix."""

from __future__ import annotations

import argparse
import sys

from agent.devices.matrix_format import format_inventory, format_topo_matrix
from agent.devices.profile import ProfileError
from agent.devices.source import NvmlSource, NvmlUnavailable, discover_profile
from cli.errors import CliError
from common.model import NodeTopology, topology_to_json


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "discover",
        help="show this node's GPUs, links, MIG and NUMA (or a profile's)",
        description="The GPU topology of this node (through NVML) or of a hardware profile.",
    )
    parser.add_argument(
        "--profile", metavar="NAME|FILE", help="a built-in profile name or a profile file"
    )
    parser.add_argument(
        "--hostname", help="hostname to report (default: this host / the profile's)"
    )
    parser.add_argument(
        "--sysfs-root",
        metavar="DIR",
        default="/",
        help="read the PCI tree, NUMA nodes and NICs under DIR instead of / (real NVML only)",
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the topology model as JSON")
    out.add_argument(
        "--topo", action="store_true", help="print the link matrix in `nvidia-smi topo -m` layout"
    )
    parser.set_defaults(func=run)


def discover(profile: str | None, hostname: str | None, sysfs_root: str = "/") -> NodeTopology:
    if profile is not None:
        try:
            return discover_profile(profile, hostname=hostname)
        except ProfileError as exc:
            raise CliError(str(exc)) from None
    try:
        return NvmlSource(hostname=hostname, sysfs_root=sysfs_root).discover()
    except NvmlUnavailable as exc:
        raise CliError(f"{exc} (use --profile NAME to inspect a hardware profile)") from None


def run(args: argparse.Namespace) -> int:
    topology = discover(args.profile, args.hostname, args.sysfs_root)
    if args.json:
        sys.stdout.write(topology_to_json(topology).decode() + "\n")
    elif args.topo:
        sys.stdout.write(format_topo_matrix(topology))
    else:
        sys.stdout.write(format_inventory(topology))
    return 0
