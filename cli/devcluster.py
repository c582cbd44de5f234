"""``topos devcluster up|down``: a local cluster to try Topos against (docs/design.md §8).

``up`` starts the same control plane the tests use, detached, records it in ``--dir`` (default
``.devcluster/``), installs the CRDs of ``deploy/crds/``, prints ``export KUBECONFIG=…`` on stdout
(so ``eval "$(topos devcluster up)"`` works) and exits. ``--nodes PROFILE:N,…`` adds simulated GPU
nodes with their agents, KWOK as their kubelet (a Job's pods complete after ``--job-duration``,
30s, unless annotated ``topos.io/sim-duration``); ``--coordinator`` a Topos coordinator the agents
stream to (authentication on; ``up`` also exports ``TOPOS_COORDINATOR`` and ``TOPOS_TOKEN``);
``--dra`` publishes NVIDIA's DRA DeviceClasses and makes the nodes' GPUs DRA devices
(``--dra-shared``: whole GPUs shareable by several claims, consumable capacity);
``--workloads [NAME,…]`` the workload controllers users run (JobSet, LeaderWorkerSet, Kubeflow
Trainer, KubeRay; all without names), built from their Go modules on first use
(docs/workloads.md); ``--kueue`` Kueue in front of them (with JobSet and LWS; docs/kueue.md).
``restart-coordinator`` starts that coordinator again (after a ``kill -9``, or to apply an
edited config). ``down`` stops all of it, waits until the ports are free, and removes what
``up`` wrote. The sequence lives in ``devcluster.playground``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli.errors import CliError
from devcluster import coordinator, kubelet, playground
from devcluster.workloads.catalog import (
    WORKLOAD_CONTROLLERS,
    UnknownController,
    with_requirements,
)

DEFAULT_DIR = Path(".devcluster")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "devcluster",
        help="a local Kubernetes control plane, simulated GPU nodes and a coordinator",
        description="Start or stop a local cluster on 127.0.0.1: etcd, kube-apiserver, "
        "kube-controller-manager; optionally simulated GPU nodes (agents, KWOK as kubelet) and a "
        "Topos coordinator.",
    )
    sub = parser.add_subparsers(dest="devcluster_command", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="start it in the background; print `export KUBECONFIG=…`")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state directory (.devcluster)")
    up.add_argument(
        "--nodes",
        metavar="PROFILE:N[,PROFILE:N…]",
        help="also register simulated GPU nodes of these hardware profiles (KWOK runs their pods)",
    )
    up.add_argument(
        "--coordinator",
        action="store_true",
        help="also start a Topos coordinator (authentication on) the nodes' agents stream to",
    )
    up.add_argument(
        "--job-duration",
        metavar="DURATION",
        type=_duration,
        default=kubelet.JOB_DURATION_S,
        help="how long a Job's pod without the topos.io/sim-duration annotation runs on the "
        "simulated nodes before it completes (default 30s; 0: until deleted)",
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
    up.add_argument(
        "--workloads",
        nargs="?",
        const=",".join(WORKLOAD_CONTROLLERS),
        metavar="NAME[,NAME…]",
        help="also start the workload controllers users run, built from their Go modules on "
        f"first use: {', '.join(WORKLOAD_CONTROLLERS)} (default: all)",
    )
    up.add_argument(
        "--kueue",
        action="store_true",
        help="also start Kueue (sigs.k8s.io/kueue, built on first use) with its integrations for "
        "Jobs, pods, JobSets and LeaderWorkerSets (JobSet and LWS start with it); docs/kueue.md",
    )
    up.set_defaults(func=run_up)

    restart = sub.add_parser(
        "restart-coordinator",
        help="start the playground's coordinator again (same URL, config and token)",
        description="Start the coordinator `up --coordinator` recorded again, on the same URL "
        "with the same config.yaml, kubeconfig and token: after it was killed (to try a restart "
        "mid-bind) or to apply an edited <dir>/coordinator/config.yaml. A running one is stopped "
        "first.",
    )
    restart.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="state directory (.devcluster)"
    )
    restart.set_defaults(func=run_restart_coordinator)

    down = sub.add_parser("down", help="stop it and free its ports")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state directory (.devcluster)")
    down.set_defaults(func=run_down)


def run_up(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    existing = playground.running(directory)
    if existing is not None:
        raise CliError(
            f"a devcluster is already running in {directory} ({existing.server}); "
            f"stop it with `topos devcluster down --dir {args.dir}`"
        )
    workloads = tuple(n.strip() for n in (args.workloads or "").split(",") if n.strip())
    if args.kueue and "kueue" not in workloads:
        workloads += ("kueue",)
    try:
        with_requirements(workloads)
    except UnknownController as exc:
        raise CliError(f"--workloads {args.workloads}: {exc}") from exc
    playground.down(directory)  # a stale record: clean it up before starting afresh
    options = playground.Options(
        directory=directory,
        nodes=args.nodes,
        dra=args.dra,
        dra_shared=args.dra_shared,
        coordinator=args.coordinator,
        job_duration_s=args.job_duration,
        workloads=workloads,
    )
    try:
        started = playground.up(options)
    except ValueError as exc:
        raise CliError(f"--nodes {args.nodes}: {_one_line(exc)}") from exc
    except playground.PlaygroundError as exc:
        raise CliError(_one_line(exc)) from exc
    for line in started.summary:
        print(line, file=sys.stderr)
    for line in started.exports:
        print(line)
    return 0


def run_restart_coordinator(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    if playground.running(directory) is None:
        raise CliError(
            f"no devcluster is running in {directory}: start one with "
            f"`topos devcluster up --coordinator --dir {args.dir}`"
        )
    try:
        process = coordinator.restart_coordinator(directory=directory)
    except coordinator.CoordinatorError as exc:
        raise CliError(_one_line(exc)) from exc
    print(process.summary(), file=sys.stderr)
    for line in process.exports():
        print(line)
    return 0


def run_down(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    if not (directory / "state.json").exists():
        playground.down(directory)
        print(f"devcluster: nothing running in {directory}", file=sys.stderr)
        return 0
    was_running = playground.down(directory)
    state = "stopped" if was_running else "was not running; cleaned up"
    print(f"devcluster: {state} ({directory})", file=sys.stderr)
    return 0


def _duration(text: str) -> float:
    try:
        return kubelet.parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
