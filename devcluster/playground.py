"""``topos devcluster up|down`` as one sequence: control plane, CRDs, coordinator, simulated nodes
and their kubelet (KWOK), and back down again.

``up`` starts, in order: etcd, kube-apiserver and kube-controller-manager (``devcluster.
controlplane``); every CRD of ``deploy/crds/`` (``devcluster.crds``); with ``coordinator`` a Topos
coordinator (``devcluster.coordinator``), authentication on; with ``nodes`` the simulated Nodes and
their agents (``devcluster.nodes``), streaming to that coordinator with pod-bound tokens
(``devcluster.credentials``), and KWOK as their kubelet (``devcluster.kubelet``); with
``workloads`` the workload controllers (JobSet, LWS, Trainer, KubeRay: ``devcluster.workloads``),
built on first use. Everything runs
detached and is recorded in the directory; a failure part-way stops what was started. ``down``
stops it all in the reverse order and waits until the control plane's ports are free.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.kube import KubeClient
from devcluster import controllers, crds, credentials, kubelet, nodes
from devcluster import coordinator as topos
from devcluster.binaries import BinariesUnavailable, ensure
from devcluster.controlplane import ControlPlane, ControlPlaneError, ControlPlaneSettings
from devcluster.workloads import launch as workload_controllers
from devcluster.workloads.catalog import with_requirements

WORKLOADS_DIR = "workloads"


class PlaygroundError(Exception):
    """``up`` failed (and stopped what it had started); the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    directory: Path
    nodes: str | None = None
    """``PROFILE:N,…`` (``devcluster.nodes.parse_spec``) or none."""
    dra: bool = False
    dra_shared: bool = False
    """As ``dra``, with whole GPUs shareable by several claims (consumable capacity)."""
    coordinator: bool = False
    job_duration_s: float = kubelet.JOB_DURATION_S
    """How long a Job's pod without ``topos.io/sim-duration`` runs on the simulated nodes; 0:
    until deleted."""
    workloads: tuple[str, ...] = ()
    """Workload controllers to start (``devcluster.workloads.catalog`` names)."""


@dataclass(slots=True)
class Playground:
    """What ``up`` started: the summary lines (stderr) and the shell exports (stdout)."""

    plane: ControlPlane
    summary: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)
    coordinator: topos.CoordinatorProcess | None = None


def running(directory: Path) -> ControlPlane | None:
    """The control plane recorded in ``directory`` if it still runs."""
    if not (directory / "state.json").exists():
        return None
    try:
        plane = ControlPlane.attach(directory)
    except ControlPlaneError:
        return None
    return plane if plane.running() else None


def up(options: Options) -> Playground:
    """Start everything ``options`` asks for; ``PlaygroundError`` (nothing left running) if a
    part fails, ``ValueError`` for a bad ``--nodes`` spec (checked before anything starts)."""
    directory = options.directory
    if options.nodes:
        nodes.parse_spec(options.nodes)
    with_requirements(options.workloads)  # UnknownController (a ValueError) before anything starts
    try:
        binaries = ensure(kwok=bool(options.nodes))  # its own stages, no kube-scheduler
    except BinariesUnavailable as exc:
        raise PlaygroundError(f"Kubernetes binaries unavailable: {exc}") from exc
    started = time.monotonic()
    try:
        plane = ControlPlane.start(
            binaries=binaries,
            directory=directory,
            settings=ControlPlaneSettings(controllers=controllers.PLAYGROUND),
            detach=True,
        )
    except ControlPlaneError as exc:
        raise PlaygroundError(f"devcluster failed to start: {exc}") from exc
    manager = " and kube-controller-manager" if plane.state.controller_manager_pid else ""
    playground = Playground(plane)
    playground.summary.append(
        f"devcluster: kube-apiserver {plane.state.kubernetes_version} at {plane.server}{manager}, "
        f"ready in {time.monotonic() - started:.1f}s (logs: {directory / 'logs'})"
    )
    try:
        _start_parts(playground, options, kwok=binaries.kwok)
    except BaseException:
        down(directory, remove_files=False)  # the logs stay for a look
        raise
    playground.exports.insert(0, f"export KUBECONFIG={plane.kubeconfig}")
    return playground


def _start_parts(playground: Playground, options: Options, *, kwok: Path | None) -> None:
    plane, directory = playground.plane, options.directory
    try:
        installed = asyncio.run(_install_crds(plane.kubeconfig))
    except crds.CrdError as exc:
        raise PlaygroundError(f"deploy/crds: {exc}") from exc
    if installed:
        playground.summary.append(f"devcluster: CRDs installed: {', '.join(installed)}")
    if options.workloads:
        try:
            started = workload_controllers.start(
                plane, options.workloads, directory=directory / WORKLOADS_DIR, detach=True
            )
        except workload_controllers.WorkloadsError as exc:
            raise PlaygroundError(f"--workloads: {exc}") from exc
        playground.summary.append(started.summary())
    url = None
    if options.coordinator:
        url = topos.reserve(directory)
        token = asyncio.run(_user_token(plane.kubeconfig, topos.state_dir(directory)))
        kubeconfig = plane.write_user_kubeconfig(
            topos.state_dir(directory) / "kubeconfig", user=topos.USER, groups=("system:masters",)
        )
        try:
            process = topos.start_coordinator(
                kubeconfig=kubeconfig, directory=directory, url=url, token_file=token
            )
        except topos.CoordinatorError as exc:
            raise PlaygroundError(str(exc)) from exc
        playground.coordinator = process
        playground.summary.append(process.summary())
        playground.exports.extend(process.exports())
    if options.nodes:
        try:
            playground.summary.append(
                nodes.start_nodes(
                    spec=options.nodes,
                    kubeconfig=plane.kubeconfig,
                    directory=directory,
                    dra=options.dra,
                    shared=options.dra_shared,
                    coordinator=url,
                )
            )
            playground.summary.append(
                kubelet.start_kubelet(
                    binary=kwok,
                    kubeconfig=plane.kubeconfig,
                    directory=directory,
                    job_duration_s=options.job_duration_s,
                )
            )
        except (ValueError, RuntimeError, kubelet.KubeletError) as exc:
            raise PlaygroundError(f"--nodes {options.nodes}: {exc}") from exc
    elif options.dra or options.dra_shared:
        asyncio.run(_publish_classes(plane.kubeconfig))
        playground.summary.append(
            "devcluster: DeviceClasses gpu.nvidia.com and mig.nvidia.com published (no nodes)"
        )


async def _install_crds(kubeconfig: Path) -> list[str]:
    async with await KubeClient.connect(kubeconfig) as kube:
        return await crds.install(kube)


async def _user_token(kubeconfig: Path, directory: Path) -> Path:
    async with await KubeClient.connect(kubeconfig) as kube:
        return await credentials.user_token(kube, directory / "user.token")


async def _publish_classes(kubeconfig: Path) -> None:
    from devcluster.dra import publish_classes

    async with await KubeClient.connect(kubeconfig) as kube:
        await publish_classes(kube)


def down(directory: Path, *, remove_files: bool = True) -> bool:
    """Stop KWOK, the agents, the coordinator and the control plane recorded in ``directory``;
    whether the control plane was still running. Safe to call on a half-started one. With
    ``remove_files`` the logs and state go too (and the directory, if nothing else is in it)."""
    kubelet.stop_kubelet(directory=directory)
    nodes.stop_nodes(directory=directory)
    topos.stop_coordinator(directory=directory)
    workload_controllers.stop_recorded(directory / WORKLOADS_DIR)
    was_running = False
    if (directory / "state.json").exists():
        try:
            plane = ControlPlane.attach(directory)
        except ControlPlaneError:
            pass
        else:
            was_running = plane.running()
            plane.stop(remove_directory=remove_files)
    if remove_files:
        for log in _LOGS:
            (directory / log).unlink(missing_ok=True)
        shutil.rmtree(directory / WORKLOADS_DIR, ignore_errors=True)
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if nothing else lives there
    return was_running


_LOGS = (kubelet.LOG_FILE, nodes.LOG_FILE, topos.LOG_FILE)
