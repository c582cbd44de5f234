"""The processes of a churn run: simulated GPU nodes with their agents, and coordinators.

Nodes are Node objects registered like ``topos devcluster up --nodes`` does
(:mod:`devcluster.nodes`), renamed for this run and labelled with its run label. Their agents run
on the fake NVML in one process per coordinator (``python -m devcluster.nodes``), streaming to it.
Each coordinator is a real ``topos coordinator`` process (``python -m cli.main coordinator``) on a
fixed 127.0.0.1 port, scheduling only this run's namespace onto this run's nodes, with
authentication off (as in the README's try-it flow). :meth:`Coordinator.kill` is a SIGKILL;
:meth:`Coordinator.start` starts it again on the same port, as a restarted container would.
Every process dies with the harness (``PR_SET_PDEATHSIG``), and nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from common.kube import NODES, KubeClient
from devcluster.kubelet import kwok_args, render_stages
from devcluster.nodes import SimNode, plan_nodes, register
from devcluster.processes import free_port, spawn
from devcluster.subprocess_env import subprocess_env

RUN_LABEL = "topos-churn/run"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Election:
    """Leader election for two coordinators (set explicitly: a branch may default it off)."""

    lease_name: str
    lease_duration_s: float = 4.0
    renew_deadline_s: float = 3.0
    retry_period_s: float = 0.5


@dataclass
class Coordinator:
    """One ``topos coordinator`` process; ``generation`` counts its starts."""

    label: str
    kubeconfig: Path
    namespace: str
    run: str
    directory: Path
    election: Election | None = None
    port: int = field(default_factory=free_port)
    generation: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def identity(self) -> str:
        """Its name in the Lease and in its Events' ``reportingInstance`` (per start)."""
        return f"churn-{self.label}-{self.generation}"

    @property
    def log_path(self) -> Path:
        return self.directory / f"coordinator-{self.label}.log"

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "coordinator": {"listen": f"127.0.0.1:{self.port}"},
            "auth": {"enabled": False},
            "scheduler": {"namespace": self.namespace, "nodeSelector": {RUN_LABEL: self.run}},
        }
        if self.election is None:
            config["leaderElection"] = {"enabled": False}
        else:
            e = self.election
            config["leaderElection"] = {
                "enabled": True,
                "namespace": self.namespace,
                "leaseName": e.lease_name,
                "identity": self.identity,
                "leaseDurationSeconds": e.lease_duration_s,
                "renewDeadlineSeconds": e.renew_deadline_s,
                "retryPeriodSeconds": e.retry_period_s,
                "releaseOnStop": False,
            }
        return config

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.generation += 1
        path = self.directory / f"coordinator-{self.label}.yaml"
        path.write_text(yaml.safe_dump(self.config()))
        with self.log_path.open("a") as log:
            log.write(f"--- start {self.generation} ({self.identity}) ---\n")
        self.proc = spawn(
            [
                sys.executable,
                "-m",
                "cli.main",
                "coordinator",
                "--kubeconfig",
                str(self.kubeconfig),
                "--config",
                str(path),
            ],
            log_path=self.log_path,
            die_with_parent=True,
            # its "own pod" (a Pod object the harness made): the leader labels it
            env=subprocess_env(POD_NAME=self.pod_name, POD_NAMESPACE=self.namespace),
        )

    @property
    def pod_name(self) -> str:
        return f"coordinator-{self.label}"

    def kill(self) -> None:
        """SIGKILL: no shutdown, no lease release, the agents' streams cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    async def wait_serving(self, timeout_s: float = 120.0) -> None:
        """Until its HTTP API answers ``/healthz``."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as http:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"coordinator {self.label} exited: {self.tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{self.url}/healthz") as resp:
                        if resp.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"coordinator {self.label} not serving: {self.tail()}")
                await asyncio.sleep(0.1)

    def tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class Agents:
    """One process hosting an agent per node, streaming to ``coordinator``."""

    kubeconfig: Path
    nodes: list[SimNode]
    coordinator: str
    log_path: Path
    remove_deleted_pods: bool = False
    """The playground's kubelet side that KWOK does not play: a deleted pod on these nodes is
    removed a second later, UID-guarded (``devcluster.terminations``)."""
    proc: subprocess.Popen[bytes] | None = None

    async def start(self, timeout_s: float = 120.0) -> None:
        ready = self.log_path.with_suffix(".ready")
        ready.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "devcluster.nodes", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--coordinator", self.coordinator, "--ready-file", str(ready)]
        if self.remove_deleted_pods:
            argv.append("--remove-deleted-pods")
        for node in self.nodes:
            argv += ["--node", f"{node.name}={node.profile}"]
        self.proc = spawn(argv, log_path=self.log_path, die_with_parent=True, env=subprocess_env())
        deadline = time.monotonic() + timeout_s
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agents not ready (see {self.log_path})")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        _terminate(self.proc)


@dataclass
class Kubelet:
    """KWOK as the run's nodes' kubelet, with the playground's own stages (``devcluster/kwok/``):
    bound pods get an IP and run; a deleted pod is removed by the agents' process, as ``devcluster
    up`` does (``Agents(remove_deleted_pods=True)``). It manages only this run's nodes (their run
    label), so runs sharing a control plane (the test session's) do not meet."""

    binary: Path
    kubeconfig: Path
    run: str
    directory: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        stages = render_stages(self.directory / "kwok-stages", job_duration_s=0)
        argv = kwok_args(
            self.binary,
            self.kubeconfig,
            stage_files=stages,
            manage=f"manage-nodes-with-label-selector={RUN_LABEL}={self.run}",
            node_lease_seconds=0,
        )
        log = self.directory / "kwok.log"
        self.proc = spawn(argv, log_path=log, die_with_parent=True)

    def stop(self) -> None:
        _terminate(self.proc)


def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, and SIGKILL after 10 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


DEFAULT_FLEET = (("dgx-a100", 2), ("pcie-8x", 2))


async def register_nodes(
    kube: KubeClient, run: str, spec: tuple[tuple[str, int], ...] = DEFAULT_FLEET
) -> list[SimNode]:
    """Ready Nodes for ``spec`` named ``<profile>-<k>-<run>``, carrying the run label."""
    planned = plan_nodes(list(spec))
    nodes = [
        SimNode(
            name=f"{n.name}-{run}",
            profile=n.profile,
            leaf=n.leaf,
            spine=n.spine,
            topology=n.topology,
        )
        for n in planned
    ]
    await register(kube, nodes)
    for node in nodes:
        await kube.patch(NODES, node.name, {"metadata": {"labels": {RUN_LABEL: run}}})
    return nodes


def gpu_capacity(nodes: list[SimNode]) -> int:
    return sum(sum(1 for g in n.topology.gpus if not g.mig_enabled) for n in nodes)
