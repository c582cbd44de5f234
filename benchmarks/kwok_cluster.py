"""The KWOK benchmark's cluster: fake GPU Nodes managed by KWOK, and the two schedulers as
processes (kube-scheduler and ``topos coordinator``), each with its own kubeconfig and a config
file that sets its client QPS/burst.

Nodes are created through the API (not by KWOK) so they carry what a real GPU node carries: the
labels the Topos agent publishes for a DGX H100 (``common.labeling`` over the built-in profile),
``kubernetes.io/hostname``, a ``topos.io/leaf``/``topos.io/spine`` place in a leaf–spine fabric,
and the capacity the kubelet and the NVIDIA device plugin would report (``nvidia.com/gpu: 8``,
CPU, memory, ``pods: 110``). The annotation ``kwok.x-k8s.io/node: fake`` hands them to KWOK,
which makes them Ready (stage ``node-initialize``), turns bound pods Running (``pod-ready``) and
removes deleted ones (``pod-delete``). No heartbeat stage: nothing here would mark a silent node
NotReady (no controller-manager), and 1,000 heartbeats would only add noise to the measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent.devices import discover_profile
from agent.devices.fake_nvml import make_gpu_uuid
from common.kube import NODES, AlreadyExists, KubeClient, Unreachable
from common.labeling import labels
from devcluster.binaries import Binaries, cache_root, ensure
from devcluster.controlplane import ControlPlane, ControlPlaneSettings
from devcluster.kubelet import kwok_args
from devcluster.nodes import capacity
from devcluster.processes import free_port, spawn, stop_group

ROOT = Path(__file__).resolve().parents[1]
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
PROFILE = "dgx-h100"
NODES_PER_LEAF = 32
LEAVES_PER_SPINE = 8
GPUS_PER_NODE = 8
_TEMPLATE = "kwok-gpu-template"
STAGES = ("node/fast/node-initialize.yaml", "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml")


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """A client QPS/burst; ``qps == 0``: no client-side limit."""

    qps: float
    burst: int

    @property
    def token(self) -> str:
        """As written on the command line: ``50/100`` or ``unlimited``."""
        return "unlimited" if self.qps == 0 else f"{self.qps:g}/{self.burst}"

    @property
    def label(self) -> str:
        return "unlimited" if self.qps == 0 else f"QPS {self.qps:g} / burst {self.burst}"


@functools.cache
def _published_template() -> tuple[str, str]:
    """What the agent publishes for the template node, as JSON (its labels and annotations)."""
    published = labels(discover_profile(PROFILE, hostname=_TEMPLATE))
    return json.dumps(published.labels), json.dumps(published.annotations)


def _published(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """The template's labels and annotations with its host name and GPU UUIDs made ``name``'s
    (discovering the fake machine once per node costs ~25 ms: two minutes at 5,000 nodes)."""
    texts = list(_published_template())
    for i in range(GPUS_PER_NODE):
        old, new = make_gpu_uuid(_TEMPLATE, i), make_gpu_uuid(name, i)
        texts = [t.replace(old, new) for t in texts]
    label_text, annotation_text = (t.replace(_TEMPLATE, name) for t in texts)
    return json.loads(label_text), json.loads(annotation_text)


def node_name(index: int) -> str:
    return f"kwok-gpu-{index:04d}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """How ``nodes`` Nodes are spread: ``leaves`` leaves of consecutive Nodes (as even as the
    count allows), ``LEAVES_PER_SPINE`` leaves a spine, and NVLink domains
    (``nvidia.com/gpu.clique``, as GPU Feature Discovery writes it) of ``clique_nodes``
    consecutive Nodes inside each leaf (none when 0)."""

    nodes: int
    leaves: int
    clique_nodes: int = 0

    def leaf(self, index: int) -> int:
        return index * self.leaves // self.nodes

    def leaf_start(self, leaf: int) -> int:
        return -(-leaf * self.nodes // self.leaves)

    def clique(self, index: int) -> str:
        leaf = self.leaf(index)
        return f"leaf-{leaf}-clique-{(index - self.leaf_start(leaf)) // self.clique_nodes}"


CLIQUE_LABEL = "nvidia.com/gpu.clique"


def node_body(index: int, fabric: Fabric | None = None) -> dict[str, Any]:
    name = node_name(index)
    leaf = index // NODES_PER_LEAF if fabric is None else fabric.leaf(index)
    node_labels, annotations = _published(name)  # what the agent writes, topology included
    if fabric is not None and fabric.clique_nodes:
        node_labels[CLIQUE_LABEL] = fabric.clique(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **node_labels,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "topos.io/leaf": f"leaf-{leaf}",
                "topos.io/spine": f"spine-{leaf // LEAVES_PER_SPINE}",
            },
            "annotations": {**annotations, KWOK_ANNOTATION: "fake"},
        },
    }


async def create_nodes(kube: KubeClient, count: int, fabric: Fabric | None = None) -> None:
    """Create ``count`` Nodes with GPU capacity (status written by us, Ready set by KWOK), in
    leaves of ``NODES_PER_LEAF`` or as ``fabric`` says."""
    status = {"capacity": capacity(discover_profile(PROFILE, hostname="x"))}
    status["allocatable"] = dict(status["capacity"])
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        body = node_body(i, fabric)
        async with sem:
            name = body["metadata"]["name"]
            for attempt in range(5):  # a POST is not retried by the client: a busy box drops some
                try:
                    await kube.create(NODES, body)
                    break
                except AlreadyExists:
                    break
                except Unreachable:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(1)
            await kube.patch(NODES, name, {"status": status}, subresource="status")

    await asyncio.gather(*(one(i) for i in range(count)))


def node_ready(node: Mapping[str, Any]) -> bool:
    """Whether a Node's Ready condition is True."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def wait_ready(
    kube: KubeClient,
    count: int,
    *,
    timeout_s: float | None = None,
    poll_s: float = 2.0,
    requests: Counter[tuple[str, str, str]] | None = None,
) -> float:
    """Seconds until ``count`` Nodes report Ready (KWOK's node-initialize stage), listing them
    every ``poll_s`` (each LIST counted in ``requests``, when given); by default allow two
    minutes plus 60 ms a node (KWOK takes its time on a busy 2-core machine)."""
    if timeout_s is None:
        timeout_s = 120.0 + 0.06 * count
    started = time.perf_counter()
    deadline = started + timeout_s
    while True:
        # From the watch cache (resourceVersion 0): 5,000 such Nodes are some 50 MB of JSON.
        listed = await kube.list(NODES, label_selector="type=kwok", resource_version="0")
        if requests is not None:
            requests["LIST", "nodes", ""] += 1
        ready = sum(1 for n in listed["items"] if node_ready(n))
        if ready >= count:
            return time.perf_counter() - started
        if time.perf_counter() > deadline:
            raise RuntimeError(f"only {ready}/{count} KWOK nodes Ready after {timeout_s:.0f}s")
        await asyncio.sleep(poll_s)


class Process:
    """A child process in its own process group, its output in a log file. The kernel kills it
    if the benchmark dies (even by SIGKILL), so a killed run leaves no scheduler behind to load
    the next one's machine: create it from the main thread."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.log = log
        self.popen = spawn(argv, log_path=log, die_with_parent=True, cwd=ROOT)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def check(self) -> None:
        if self.popen.poll() is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"{self.name} exited ({self.popen.returncode}):\n{tail}")

    def stop(self) -> None:
        stop_group(self.popen.pid, reap=self.popen.poll)
        self.popen.poll()


#: No controller-manager runs, so nothing would lift the ``node.kubernetes.io/not-ready`` taint
#: the ``TaintNodesByCondition`` admission plugin puts on every new Node once KWOK makes it Ready;
#: the benchmark's API server runs without that plugin instead (flag values accumulate).
APISERVER_ARGS = ("--disable-admission-plugins=TaintNodesByCondition",)


def start_kwok(binaries: Binaries, plane: ControlPlane, work: Path) -> Process:
    if binaries.kwok is None or binaries.kwok_stages is None:
        raise RuntimeError("kwok missing: run `python -m devcluster.binaries ensure --all`")
    kubeconfig = plane.write_user_kubeconfig(
        work / "kwok.kubeconfig", user="kwok-controller", groups=("system:masters",)
    )
    argv = kwok_args(
        binaries.kwok,
        kubeconfig,
        stage_files=[binaries.kwok_stages / stage for stage in STAGES],
        manage=f"manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
    )
    return Process("kwok", argv, work / "kwok.log")


def start_kube_scheduler(
    binaries: Binaries,
    plane: ControlPlane,
    work: Path,
    limit: Limit,
    tag: str,
    *,
    feature_gates: str = "",
) -> Process:
    if binaries.kube_scheduler is None:
        raise RuntimeError("kube-scheduler missing: `python -m devcluster.binaries ensure --all`")
    kubeconfig = plane.write_user_kubeconfig(
        work / "kube-scheduler.kubeconfig",
        user="bench-kube-scheduler",
        groups=("system:masters",),
    )
    qps, burst = (limit.qps, limit.burst) if limit.qps > 0 else (-1, 0)  # client-go: < 0 = none
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}],
    }
    path = work / f"kube-scheduler-{tag}.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [
        str(binaries.kube_scheduler),
        f"--config={path}",
        f"--secure-port={free_port()}",
        "--bind-address=127.0.0.1",
        "-v=1",
        *([f"--feature-gates={feature_gates}"] if feature_gates else []),
    ]
    return Process("kube-scheduler", argv, work / f"kube-scheduler-{tag}.log")


def compile_topos(tree: Path | None = None) -> None:
    """Byte-compile a tree's ``common`` and ``coordinator`` once (this checkout by default), as
    the image does (``compileall`` in Dockerfile.coordinator): with ``PYTHONDONTWRITEBYTECODE``
    set, as in this repository's shells, every coordinator start would otherwise compile ~300
    modules (~0.15 s of CPU). The bytecode goes to ``~/.cache/topos/pycache`` (Python's
    ``PYTHONPYCACHEPREFIX``), not into the source tree, and this process's environment names that
    prefix so the coordinators it starts read it there."""
    root = tree if tree is not None else Path(__file__).resolve().parent.parent
    prefix = cache_root().parent / "pycache"
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "common", "coordinator"],
        cwd=root,
        env=env,
        check=False,
    )
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)


def start_topos(plane: ControlPlane, work: Path, limit: Limit, tag: str, *, binds: int) -> Process:
    kubeconfig = plane.write_user_kubeconfig(
        work / "topos.kubeconfig", user="bench-topos", groups=("system:masters",)
    )
    config = {
        "coordinator": {"listen": f"127.0.0.1:{free_port()}"},
        "auth": {"enabled": False},
        "leaderElection": {"enabled": False},  # as kube-scheduler's leaderElect: false above
        "scheduler": {"enabled": True, "maxBindsInFlight": binds},
        "kube": {"qps": limit.qps, "burst": limit.burst},
    }
    path = work / f"topos-{tag}.yaml"
    path.write_text(yaml.safe_dump(config))
    # The image's entry point (Dockerfile.coordinator: topos-coordinator), not the `topos` CLI,
    # which imports every sub-command (the demo, the simulator) before it starts.
    argv = [
        sys.executable,
        "-m",
        "coordinator.app.main",
        f"--kubeconfig={kubeconfig}",
        f"--config={path}",
    ]
    return Process("topos coordinator", argv, work / f"topos-{tag}.log")


def parse_limits(text: str) -> list[Limit]:
    out: list[Limit] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part == "unlimited":
            out.append(Limit(qps=0, burst=1))
            continue
        qps, _, burst = part.partition("/")
        out.append(Limit(qps=float(qps), burst=int(burst or 2 * float(qps))))
    return out


def start_profiler(pid: int, path: Path) -> subprocess.Popen[bytes] | None:
    """py-spy on ``pid``, raw stacks into ``path``: only samples of the thread holding the GIL
    (``--gil``), so idle executor threads and the event loop waiting in epoll are not counted as
    work (without it they were a third of the samples of a SchedulingDaemonset run)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found; not profiling", file=sys.stderr)
        return None
    argv = [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--gil"]
    argv += ["-o", str(path)]
    return spawn(argv, log_path=path.with_suffix(".log"), die_with_parent=True)


@dataclass(frozen=True, slots=True)
class Cluster:
    """What :func:`kwok_cluster` started: the binaries, the run's scratch folder, the control
    plane, a client of it, and how long the Nodes took to be created and then Ready (s)."""

    binaries: Binaries
    work: Path
    plane: ControlPlane
    kube: KubeClient
    created_s: float
    ready_s: float


@contextlib.asynccontextmanager
async def kwok_cluster(
    prefix: str,
    nodes: int,
    *,
    apiserver_args: Callable[[Path], Sequence[str]] = lambda work: (),
    fabric: Fabric | None = None,
    keep: bool = False,
) -> AsyncIterator[Cluster]:
    """A control plane (its API server with :data:`APISERVER_ARGS` and ``apiserver_args`` of
    the scratch folder), KWOK, Topos compiled, and ``nodes`` GPU Nodes (:func:`create_nodes`,
    in ``fabric``) Ready; torn down on the way out (the scratch folder ``/tmp/<prefix>…`` kept
    when ``keep``)."""
    binaries = ensure(extra=True, log=False)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    args = (*APISERVER_ARGS, *apiserver_args(work))
    plane = ControlPlane.start(
        binaries=binaries, settings=ControlPlaneSettings(extra_apiserver_args=args)
    )
    kwok: Process | None = None
    try:
        kube = await KubeClient.connect(plane.kubeconfig)
        try:
            kwok = start_kwok(binaries, plane, work)
            compile_topos()
            t0 = time.perf_counter()
            await create_nodes(kube, nodes, fabric)
            created = time.perf_counter() - t0
            ready = await wait_ready(kube, nodes)
            yield Cluster(binaries, work, plane, kube, created, ready)
        finally:
            await kube.close()
    finally:
        tear_down(kwok, plane, work, keep=keep)


def tear_down(kwok: Process | None, plane: ControlPlane, work: Path, *, keep: bool) -> None:
    """Stop KWOK and the control plane; remove the run's files unless ``keep`` (then say where)."""
    if kwok is not None:
        kwok.stop()
    plane.stop()
    if keep:
        print(f"logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
