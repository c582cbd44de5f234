"""``topos devcluster up|down``: a local control plane to try Topos against (DESIGN.md §8).

``up`` starts the same control plane the tests use, detached, records it in ``--dir`` (default
``.devcluster/``), prints ``export KUBECONFIG=…`` on stdout (so ``eval "$(topos devcluster up)"``
works) and exits; ``down`` stops it, waits until its ports are free, and removes what ``up`` wrote.

Extension point for simulated nodes (``--nodes PROFILE:N,…``): when a module ``devcluster.nodes``
exists, ``up --nodes SPEC`` calls ``devcluster.nodes.start_nodes(spec=SPEC, kubeconfig=PATH,
directory=DIR) -> str`` once the API server is ready (the string is printed as a summary line;
a ``ValueError`` or ``RuntimeError`` stops the cluster again and is reported as the error), and
``down`` calls ``devcluster.nodes.stop_nodes(directory=DIR)`` before stopping the control plane.

``--dra`` publishes NVIDIA's DRA DeviceClasses (``devcluster.dra``) and, with ``--nodes``, makes
the simulated nodes' GPUs DRA devices (a ResourceSlice per node, no device-plugin resources);
``--dra-shared`` does the same with whole GPUs shareable by several claims (consumable capacity).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from pathlib import Path
from types import ModuleType

from cli.errors import CliError
from devcluster.binaries import BinariesUnavailable, ensure
from devcluster.controlplane import ControlPlane, ControlPlaneError

DEFAULT_DIR = Path(".devcluster")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "devcluster",
        help="a local etcd + kube-apiserver + kube-controller-manager on 127.0.0.1",
        description="Start or stop a local Kubernetes control plane "
        "(etcd, kube-apiserver, kube-controller-manager).",
    )
    sub = parser.add_subparsers(dest="devcluster_command", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="start it in the background; print `export KUBECONFIG=…`")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state directory (.devcluster)")
    up.add_argument(
        "--nodes",
        metavar="PROFILE:N[,PROFILE:N…]",
        help="also register simulated GPU nodes of these hardware profiles",
    )
    up.add_argument(
        "--dra",
        action="store_true",
        help="GPUs as NVIDIA DRA devices: DeviceClasses gpu.nvidia.com and mig.nvidia.com, and "
        "with --nodes a ResourceSlice per node instead of nvidia.com/gpu capacity",
    )
    up.add_argument(
        "--dra-shared",
        action="store_true",
        help="as --dra, with whole GPUs shareable by several claims (allowMultipleAllocations, "
        "capacity memory and compute)",
    )
    up.set_defaults(func=run_up)

    down = sub.add_parser("down", help="stop it and free its ports")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state directory (.devcluster)")
    down.set_defaults(func=run_down)


def _nodes_module() -> ModuleType | None:
    try:
        return importlib.import_module("devcluster.nodes")
    except ModuleNotFoundError as exc:
        if exc.name == "devcluster.nodes":
            return None
        raise


def run_up(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    nodes = _nodes_module() if args.nodes else None
    if args.nodes and nodes is None:
        raise CliError("--nodes is not available in this build (no devcluster.nodes module)")
    if (directory / "state.json").exists():
        try:
            existing = ControlPlane.attach(directory)
        except ControlPlaneError:
            existing = None
        if existing is not None and existing.running():
            raise CliError(
                f"a devcluster is already running in {directory} ({existing.server}); "
                f"stop it with `topos devcluster down --dir {args.dir}`"
            )
        if existing is not None:
            existing.stop()  # a stale record: clean it up before starting afresh
    try:
        binaries = ensure()
    except BinariesUnavailable as exc:
        raise CliError(f"Kubernetes binaries unavailable: {exc}") from exc
    started = time.monotonic()
    try:
        plane = ControlPlane.start(binaries=binaries, directory=directory, detach=True)
    except ControlPlaneError as exc:
        raise CliError(f"devcluster failed to start: {_one_line(exc)}") from exc
    manager = " and kube-controller-manager" if plane.state.controller_manager_pid else ""
    summary = [
        f"devcluster: kube-apiserver {plane.state.kubernetes_version} at {plane.server}{manager}, "
        f"ready in {time.monotonic() - started:.1f}s (logs: {directory / 'logs'})"
    ]
    if nodes is not None:
        try:
            summary.append(
                str(
                    nodes.start_nodes(
                        spec=args.nodes,
                        kubeconfig=plane.kubeconfig,
                        directory=directory,
                        dra=args.dra,
                        shared=args.dra_shared,
                    )
                )
            )
        except (ValueError, RuntimeError) as exc:
            plane.stop()
            raise CliError(f"--nodes {args.nodes}: {_one_line(exc)}") from exc
    elif args.dra or args.dra_shared:
        summary.append(_publish_classes(plane.kubeconfig))
    for line in summary:
        print(line, file=sys.stderr)
    print(f"export KUBECONFIG={plane.kubeconfig}")
    return 0


def _publish_classes(kubeconfig: Path) -> str:
    from common.kube import KubeClient
    from devcluster.dra import publish_classes

    async def publish() -> None:
        async with await KubeClient.connect(kubeconfig) as kube:
            await publish_classes(kube)

    asyncio.run(publish())
    return "devcluster: DeviceClasses gpu.nvidia.com and mig.nvidia.com published (no nodes)"


def run_down(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    if not (directory / "state.json").exists():
        print(f"devcluster: nothing running in {directory}", file=sys.stderr)
        return 0
    try:
        plane = ControlPlane.attach(directory)
    except ControlPlaneError as exc:
        raise CliError(_one_line(exc)) from exc
    nodes = _nodes_module()
    if nodes is not None:
        nodes.stop_nodes(directory=directory)
    was_running = plane.running()
    plane.stop()
    state = "stopped" if was_running else "was not running; cleaned up"
    print(f"devcluster: {state} ({directory})", file=sys.stderr)
    return 0


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
