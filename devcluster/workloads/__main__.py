"""``python -m devcluster.workloads ensure [NAME…]``: find or build the workload controllers
(all of them without names) and print each binary's path."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from devcluster.binaries import BinariesUnavailable
from devcluster.workloads import build
from devcluster.workloads.catalog import CONTROLLERS, UnknownController, with_requirements


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster.workloads",
        description="Find or build the workload controllers (JobSet, LWS, Trainer, KubeRay).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    ensure = sub.add_parser("ensure", help="find or build; print each binary's path")
    ensure.add_argument("names", nargs="*", help=f"controllers (default: {' '.join(CONTROLLERS)})")
    args = parser.parse_args(argv)
    try:
        controllers = with_requirements(args.names or list(CONTROLLERS))
    except UnknownController as exc:
        parser.error(str(exc))
    failed = 0
    for controller in controllers:
        started = time.monotonic()
        try:
            built = build.ensure(controller)
        except BinariesUnavailable as exc:
            print(f"workloads: {controller.name} unavailable: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(
            f"workloads: {controller.name} {controller.version} ready in "
            f"{time.monotonic() - started:.1f}s",
            file=sys.stderr,
        )
        print(built.binary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
