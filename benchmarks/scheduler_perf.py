"""scheduler_perf's workloads on KWOK: upstream's own workload YAML, Topos beside kube-scheduler
in one run on one control plane.

Kubernetes measures its scheduler with the test cases under
``test/integration/scheduler_perf/`` (``<area>/performance-config.yaml``: opcodes over node and
pod templates, counts as parameters per named workload). This runner reads that YAML from the
``k8s.io/kubernetes`` Go module of the control plane's version (``go mod download``; nothing is
copied into the repository), takes one test case and workload (``SchedulingBasic`` /
``500Nodes`` by default), creates its Nodes with the node template (KWOK makes them Ready and
runs their pods), then for each scheduler in turn — kube-scheduler of the same version for
``schedulerName: default-scheduler``, ``topos coordinator`` for ``topos`` (both as
``benchmarks/kwok_cluster.py`` starts them, client QPS/burst ``--limit``) — runs the workload's
ops in their order, as upstream's executor does: each ``createPods`` step's pods from its
template, waiting until they are bound before the next op (a workload with no pods waited for
before its measured phase gets one warm-up pod, 1m of CPU, first: upstream's scheduler runs from
the start of the workload, so neither scheduler's start-up — Topos's imports and first sync,
~20 % of its CPU in SchedulingWithMixedChurn — is measured). The measured phase is the
``collectMetrics`` step (from its first create to its last bind) or the span from
``startCollectingMetrics`` to ``stopCollectingMetrics`` (the pods created in it, in its
``namespaces``, matching its ``labelSelector``), measured as ``benchmarks/kwok_run.py``
measures: pods bound per second from the first create sent to the last bind seen on a watch,
create→bound latency p50/p99, scheduler CPU per pod (the scheduler's child processes' included
and shown apart, "in workers": Topos' forecast worker, spawned at its first forecast, ~1 s of
CPU to start), API requests per pod (less the
benchmark's own), RSS. The pods are deleted before the next scheduler's turn (their finalizers
lifted); the Nodes stay.

The opcodes read: ``createNodes`` (with ``labelNodePrepareStrategy``: its label on the nodes,
values round robin, as upstream's ``LabelNodePrepareStrategy``; with
``nodeAllocatableStrategy``: extra allocatable and a CSINode per Node,
``benchmarks/scheduler_perf_volumes.py``; each node is named for the template's
``generateName`` or its ``name``; the Nodes of the createNodes ops before any pod or
metrics op are made once and stay from one scheduler's turn to the next, those of a later one —
EventHandlingNodeAdd/NodeUpdate — are made at that point of each turn and deleted after it, and
a workload with no Nodes of the first kind warms up on a scratch Node deleted before its ops),
``createNamespaces`` (``prefix-0``, ``prefix-1``, …, labelled as its
``namespaceTemplatePath``), ``createPods`` (with its ``namespace``: the affinity templates name
``sched-0`` and ``sched-1``; without one, a namespace of the run's, which the ops after it call
``namespace-<op index>`` as upstream's do; ``skipWaitToCompletion``: not waited for — a
``barrier`` does; ``persistentVolumeTemplatePath``/``persistentVolumeClaimTemplatePath``: a
bound volume and claim per pod, made before the step's pods), ``createPodSets`` (its
``createPodsOp`` once per namespace ``<namespacePrefix>-<i>``, unrolled as upstream unrolls
it), ``barrier``, ``deletePods``, ``startCollectingMetrics``/``stopCollectingMetrics`` and
``updateAny`` (``benchmarks/scheduler_perf_sequence.py``), ``churn`` (``create`` mode: its
templates' objects created every ``intervalMilliseconds`` while the measured pods are, for up
to ``number`` ticks — upstream's Unschedulable case; ``recreate`` mode: ``number`` slots per
template, each tick creating into an empty one or deleting the object in a full one —
SchedulingWithMixedChurn's Node, unschedulable Pod and Service), and the DRA cases'
``createResourceDriver`` (upstream's fake driver: a ResourceSlice per matching Node with
``maxClaimsPerNode`` devices, published before the schedulers start; inside a metrics
window — PublishResourceSlices, which times the scheduler's informer — refused) and
``createAny`` (one object from a file — a DeviceClass, a ResourceClaimTemplate — made at the
start of each scheduler's turn). A DRA workload runs kube-controller-manager's resourceclaim
controller, as upstream's runner does: it creates the pods' claims from their templates.
``allocResourceClaims`` allocates the claims of a namespace made by ``createAny`` in the test
itself, as upstream's op does (``benchmarks/scheduler_perf_claims.py``: random nodes, first-fit
devices, written to each claim's status) at the start of each turn. A ``createPods`` step with
``steadyState`` (and ``duration``) keeps its ``count`` pods coming for that long: each batch,
once bound, is deleted and the next created, and the throughput is upstream's average of
1-second samples (``benchmarks/scheduler_perf_steady.py``); the controller-manager then also
runs the garbage collector, which deletes the deleted pods' claims, as upstream's runner does.
After each turn the claims (and volumes) are deleted before the next. Another opcode
(``sleep``), a key not read here, a templated (``{{…}}``) file where one object is read or a bad
parameter is an error naming the key and the value. A workload's ``featureGates`` are not read:
the control plane runs with its defaults.
``--param name=value`` overrides a workload's parameter (to run a case at a size upstream gives
it no workload for, or a steady state for longer: ``--param duration=30s``; say so): a count,
``true``/``false`` or a Go duration, of the kind the workload gives it.

    .venv/bin/python -m benchmarks.scheduler_perf [--case SchedulingBasic] [--workload 500Nodes]
        [--config misc/performance-config.yaml] [--limit unlimited] [--order kube-scheduler,topos]
        [--param initNodes=500 ...] [--repeat N] [--profile DIR] [--audit] [--phases] [--json]

``--profile DIR`` records the coordinator with ``py-spy`` during its measured phase only
(``DIR/topos-<tag>.txt``, raw collapsed stacks), and the API server's Go CPU profile over the
first seconds of every run's (``DIR/apiserver-<tag>.pprof``, for ``go tool pprof -top``).
``--audit``: the API server keeps an audit log of pod writes and each run prints its measured
phase's by client (``bench-topos``, ``bench-kube-scheduler``, ``kwok-controller``): the requests
per pod leave ``pods/status`` out, as KWOK's Running writes share that row with the scheduler's
explanations and nominations. ``--phases``: a steady state's pods, step by step (their claim
made, named in the pod, protected, allocated; the pod bound), p50 ms after the create, from a
watch of the claims beside the pods'.

**Order.** The Nodes' creation keeps the API server busy for a while after they are Ready, and the
first pods bound to fresh KWOK Nodes bring LISTs and WATCHes that come only once: both fell on
the scheduler measured first, which then lost 0.1-0.4x of pods/s against the second (the
benchmark also creates its pods slower on a cold server, and bound pods/s follow the creation
rate). So before the first scheduler starts, the runner waits for the API server to go quiet and
warms the pod path with no scheduler (``benchmarks/kwok_settle.py``: as many pods as the measured
phase, one at least on each Node, created, bound, given an Event, Running, deleted). A measured
phase lasts a few seconds, so one run's ratio still moves by 0.1 or so on a quiet machine (under
load 9-15, pods/s from 0.5x to 1.6x in one invocation): ``--repeat N`` runs N
rounds of ``--order``, every other one reversed (kube, Topos, Topos, kube, …), prints each
round's ratios and their median.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psutil

from benchmarks.apiserver_metrics import Requests, cpu_profile, requests_total, scheduler_share
from benchmarks.connections import ConnectionCount
from benchmarks.kwok_audit import PodWriters, audit_args
from benchmarks.kwok_cluster import (
    APISERVER_ARGS,
    KWOK_ANNOTATION,
    Limit,
    Process,
    compile_topos,
    parse_limits,
    start_kube_scheduler,
    start_kwok,
    start_profiler,
    start_topos,
    wait_ready,
)
from benchmarks.kwok_run import Run, cpu_seconds, worker_cpu_seconds
from benchmarks.kwok_settle import clear, settle, warm_up
from benchmarks.kwok_throughput import watch
from benchmarks.scheduler_perf_claims import allocate_claims
from benchmarks.scheduler_perf_objects import (
    WorkloadError,
    create_any,
    publish_slices,
    run_churn,
)
from benchmarks.scheduler_perf_sequence import (
    SCHEDULED,
    Barrier,
    DeletePods,
    PodBook,
    StartMetrics,
    StopMetrics,
    WaitTimeout,
    delete_pods,
    drop_finalizers,
    update_any,
)
from benchmarks.scheduler_perf_steady import (
    phase_medians,
    steady_state,
    throughput_samples,
)
from benchmarks.scheduler_perf_volumes import (
    AttachCount,
    NodeAllocatable,
    attach_counts,
    clear_volumes,
    create_csinodes,
    create_volumes,
    pod_with_claim,
)
from benchmarks.scheduler_perf_workload import (
    PERF_DIR,
    Step,
    TurnNodes,
    Workload,
    load_workload,
    module_dir,
    parse_params,
)
from common.kube import EVENTS, NAMESPACES, NODES, PODS, RESOURCE_CLAIMS, KubeClient
from common.kube.errors import AlreadyExists, NotFound
from devcluster.binaries import (
    KUBERNETES_VERSION,
    ensure,
)
from devcluster.controlplane import ControlPlane, ControlPlaneSettings

SCHEDULERS = {"kube-scheduler": "default-scheduler", "topos": "topos"}
#: As upstream's scheduler_perf API server (its util.go): the Priority admission plugin is off, so
#: the templates' ``spec.priority`` (PreemptionBasic, Unschedulable) is taken as written.
PERF_APISERVER_ARGS = (*APISERVER_ARGS, "--disable-admission-plugins=Priority")
#: Upstream runs the resourceclaim controller on its runner's client, 5,000 QPS (util.go).
CONTROLLER_ARGS = ("--kube-api-qps=5000", "--kube-api-burst=5000")
#: Requests the resourceclaim controller makes and neither scheduler does: it creates a pod's
#: claims from its templates and names them in the pod's status (server-side apply).
CLAIM_CONTROLLER_ROWS = (("POST", "resourceclaims", ""), ("APPLY", "pods", "status"))
#: Requests of a steady-state run neither scheduler makes: the benchmark deletes each bound
#: batch, the garbage collector deletes the claims the deleted pods owned.
STEADY_ROWS = (("DELETECOLLECTION", "pods", ""), ("DELETE", "resourceclaims", ""))
CREATORS = 32


def node_body(
    template: Mapping[str, Any], index: int, label: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Node (named ``<generateName><index>``, as createResourceDriver's ``nodes`` pattern
    expects, or the template's ``name``: SchedulingDaemonset's pods name their node; handed to
    KWOK) and the status to write, from the node template; ``label``: what
    the step's labelNodePrepareStrategy gives it."""
    meta = dict(template.get("metadata") or {})
    generate = meta.pop("generateName", None)
    name = meta.get("name") or f"{generate or 'perf-node-'}{index:05d}"
    labels = {**(meta.get("labels") or {}), **(label or {})}
    labels |= {"kubernetes.io/hostname": name, "type": "kwok"}
    annotations = {**(meta.get("annotations") or {}), KWOK_ANNOTATION: "fake"}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {**meta, "name": name, "labels": labels, "annotations": annotations},
        "spec": dict(template.get("spec") or {}),
    }
    capacity = dict((template.get("status") or {}).get("capacity") or {})
    allocatable = dict((template.get("status") or {}).get("allocatable") or capacity)
    return body, {"capacity": capacity, "allocatable": allocatable}


#: Seconds of the API server's CPU profile from the start of a measured phase (``--profile``).
APISERVER_PROFILE_S = 4

#: What a workload without unmeasured pods binds before measuring: the scheduler is up.
WARM_UP: Final = {
    "metadata": {},
    "spec": {
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10.1",
                "resources": {"requests": {"cpu": "1m"}},
            }
        ]
    },
}


def pod_body(template: Mapping[str, Any], name: str, scheduler: str) -> dict[str, Any]:
    """The pod of a rendered template, named ``name`` unless the template names it (upstream's
    EventHandlingPodUpdate names its pods ``pod-…-{{ .Index }}``, which its updateAny replaces);
    for ``scheduler``."""
    meta = dict(template.get("metadata") or {})
    meta.pop("generateName", None)
    name = meta.get("name") or name
    spec = {**(template.get("spec") or {}), "schedulerName": scheduler}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name}, "spec": spec}


async def create_nodes(kube: KubeClient, steps: Sequence[Step], first: int = 0) -> list[str]:
    """The steps' Nodes, created with their status, indexes from ``first`` on; their names, in
    order."""
    sem = asyncio.Semaphore(32)
    bodies: list[tuple[dict[str, Any], dict[str, Any]]] = []
    csi: list[tuple[str, NodeAllocatable]] = []
    for step in steps:
        for j in range(step.count):
            label = None
            if step.label is not None:
                key, values = step.label
                label = {key: values[j % len(values)]}  # round robin, as upstream
            render = step.template.render(j, step.count)
            body, status = node_body(render, first + len(bodies), label)
            if step.allocatable is not None:  # upstream's NodeAllocatableStrategy
                status["allocatable"] |= step.allocatable.allocatable
                csi.append((body["metadata"]["name"], step.allocatable))
            bodies.append((body, status))

    async def one(body: dict[str, Any], status: dict[str, Any]) -> None:
        async with sem:
            await kube.create(NODES, body)
            await kube.patch(
                NODES, body["metadata"]["name"], {"status": status}, subresource="status"
            )

    await asyncio.gather(*(one(b, s) for b, s in bodies))
    for strategy in {id(s): s for _, s in csi}.values():
        await create_csinodes(kube, [n for n, s in csi if s is strategy], strategy)
    return [b["metadata"]["name"] for b, _ in bodies]


#: The Node a workload without Nodes of its own warms up on (EventHandlingNodeAdd's are all made
#: in the turns): made for the warm-up, deleted before the turn's first op.
SCRATCH_NODE: Final = "perf-warm-up-node"


@contextlib.asynccontextmanager
async def scratch_node(kube: KubeClient) -> AsyncIterator[str]:
    """A Node for a warm-up where there is no other; deleted, and gone, on the way out."""
    body, status = node_body({"metadata": {"name": SCRATCH_NODE}, "status": _SCRATCH_STATUS}, 0)
    await kube.create(NODES, body)
    await kube.patch(NODES, SCRATCH_NODE, {"status": status}, subresource="status")
    await wait_ready(kube, 1)
    try:
        yield SCRATCH_NODE
    finally:
        await delete_nodes(kube, [SCRATCH_NODE])


_SCRATCH_STATUS: Final = {"capacity": {"pods": "110", "cpu": "4", "memory": "32Gi"}}


async def delete_nodes(kube: KubeClient, names: Sequence[str]) -> None:
    """Delete the Nodes and wait until they are gone (their pods deleted first)."""
    for name in names:
        with contextlib.suppress(NotFound):
            await kube.delete(NODES, name)
    left = set(names)
    while left:
        listed = await kube.list(NODES, resource_version="0")
        left &= {n["metadata"]["name"] for n in listed["items"]}
        if left:
            await asyncio.sleep(0.2)


def _dressed(body: dict[str, Any], scheduler: str) -> dict[str, Any]:
    """An updateAny body as the runner made the object: a Node as :func:`node_body` makes one
    (KWOK's annotation, the hostname and ``type`` labels: KWOK drops a Node that loses them) with
    its status as written, a Pod for ``scheduler`` (a pod's schedulerName cannot change); any
    other object as it is."""
    if body.get("kind") == "Pod":
        return {**body, "spec": {**(body.get("spec") or {}), "schedulerName": scheduler}}
    if body.get("kind") != "Node":
        return body
    node, _ = node_body(body, 0)
    return {**node, "status": body.get("status") or {}}


async def _create(
    kube: KubeClient, namespace: str, bodies: Sequence[dict[str, Any]], sent: dict[str, float]
) -> None:
    sem = asyncio.Semaphore(CREATORS)

    async def one(body: dict[str, Any]) -> None:
        async with sem:
            sent[body["metadata"]["name"]] = time.perf_counter()
            await kube.create(PODS, body, namespace=namespace)

    await asyncio.gather(*(one(b) for b in bodies))


async def _ensure_namespace(
    kube: KubeClient, name: str, labels: Mapping[str, str] | None = None
) -> None:
    meta: dict[str, Any] = {"name": name, **({"labels": dict(labels)} if labels else {})}
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
    with contextlib.suppress(AlreadyExists):  # the workload's own, kept between turns
        await kube.create(NAMESPACES, body)


WARM_UP_SPACE, MEASURED_SPACE = "(warm-up)", "(measured)"


def namespaces_of(workload: Workload, run_namespace: str) -> dict[str, str]:
    """Each namespace the workload names (its ops' own, and upstream's ``namespace-<op index>``
    of a createPods op without one), and ``(warm-up)``, ``(measured)`` and ``(churn-<i>)`` →
    the namespace it is in this turn: a name the workload gives stays, the others are the
    run's (``<run>`` for the measured pods, ``<run>-namespace-<i>``, ``<run>-init``)."""
    out = {WARM_UP_SPACE: f"{run_namespace}-init"}
    out |= {n: n for n in workload.namespaces}
    for s in workload.pods:
        if s.namespace:
            out[s.namespace] = s.namespace
        elif s.alias:
            out[s.alias] = run_namespace if s.measured else f"{run_namespace}-{s.alias}"
        if s.measured:
            out[MEASURED_SPACE] = out[s.namespace or s.alias or ""]
    window = workload.window
    for name in window.namespaces if window is not None else ():
        out.setdefault(name, name)
    for i, churn in enumerate(workload.churn):
        out[f"(churn-{i})"] = churn.namespace or f"{run_namespace}-churn-{i}"
    return out


@dataclass(slots=True)
class PerfRun(Run):
    claims_allocated: int | None = None  # DRA cases: the measured namespace's, after the turn
    #: Nodes with CSINode limits: volumes attached per node at the turn's end, per driver
    attach: list[AttachCount] = dataclasses.field(default_factory=list)
    connections_opened: int = 0  # to the API server in the measured phase (a floor: sampled)
    connections_peak: int = 0
    scheduled_events: int = 0  # Scheduled Events in the measured namespace at the last bind
    #: seconds after the last bind until the rest were written (0: all were by then), and the
    #: scheduler's CPU over the measured phase to then
    events_after_s: float = 0.0
    cpu_events_s: float = 0.0
    #: a steady-state run's measured window (perf_counter seconds): its rate is upstream's
    window: tuple[float, float] | None = None
    #: ``--audit``: the measured phase's pod writes by (user, verb, subresource), every client
    pod_writes: Counter[tuple[str, str, str]] | None = None
    #: ``--phases``: a steady state's steps per pod (see ``scheduler_perf_steady``)
    phases: dict[str, dict[str, float]] | None = None

    @property
    def samples(self) -> list[float]:
        """A steady-state run's throughput samples, as upstream's collector takes them."""
        if self.window is None:
            return []
        return throughput_samples(list(self.bound.values()), *self.window)

    @property
    def rate(self) -> float:
        """Pods bound per second: from the first create to the last bind, or in a steady state
        the average of upstream's 1-second samples (its SchedulingThroughput)."""
        if self.window is None:
            return len(self.bound) / self.span_s if self.bound else 0.0
        samples = self.samples
        return sum(samples) / len(samples) if samples else 0.0

    def summary(self) -> str:
        text = Run.summary(self)
        if self.window is None:
            return text
        samples = sorted(self.samples)
        p50 = samples[math.ceil(len(samples) / 2) - 1] if samples else float("nan")
        text = (
            f"{text}\n{'':14s} steady state for {self.window[1] - self.window[0]:g} s: "
            f"upstream's SchedulingThroughput average {self.rate:.1f} pods/s over "
            f"{len(samples)} 1-s samples (p50 {p50:.1f}); {len(self.bound)} pods bound"
        )
        if self.phases is not None:
            steps = phase_medians(self.sent, self.phases, self.bound)
            said = ", ".join(f"{label} {ms:.0f}" for label, ms in steps) or "none seen whole"
            text += f"\n{'':14s} a pod's steps, ms after its create (p50): {said}"
        return text


@dataclass(slots=True)
class _Window:
    """A measured phase being recorded: what it started from (see :func:`one_run`)."""

    namespaces: tuple[str, ...]
    requests0: Requests
    cpu0: float
    workers0: float
    api0: float
    connections: ConnectionCount
    stop_churn: asyncio.Event
    churning: list[asyncio.Task[int]]
    spy: subprocess.Popen[bytes] | None = None
    pprof: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None


async def _begin(
    plane: ControlPlane,
    proc: Process,
    workload: Workload,
    run: PerfRun,
    spaces: Mapping[str, str],
    namespaces: Sequence[str],
    kube: KubeClient,
    *,
    profile: Path | None,
    apiserver_profile: Path | None,
    writers: PodWriters | None,
) -> _Window:
    requests0 = await asyncio.to_thread(requests_total, plane)
    if writers is not None:
        writers.read()  # from here on
    spy = None if profile is None else start_profiler(proc.pid, profile)
    cpu0 = cpu_seconds(proc.pid)
    workers0 = worker_cpu_seconds(proc.pid)
    api0 = cpu_seconds(plane.state.apiserver_pid)
    pprof = (
        None
        if apiserver_profile is None
        else asyncio.create_task(
            asyncio.to_thread(cpu_profile, plane, APISERVER_PROFILE_S, apiserver_profile)
        )
    )
    connections = ConnectionCount(proc.pid, plane.state.apiserver_port).start()
    stop = asyncio.Event()
    name = SCHEDULERS[run.scheduler]
    churning = [
        asyncio.create_task(run_churn(kube, c, spaces[f"(churn-{i})"], name, stop))
        for i, c in enumerate(workload.churn)
    ]
    return _Window(
        tuple(namespaces), requests0, cpu0, workers0, api0, connections, stop, churning, spy, pprof
    )


#: How long the measured phase may wait past the last bind for the Scheduled Events.
EVENTS_WAIT_S: Final = 10.0


async def _scheduled_events(
    kube: KubeClient,
    namespaces: tuple[str, ...],
    run: PerfRun,
    own: Counter[tuple[str, str, str]],
) -> int:
    """The measured pods' Scheduled Events written so far (init pods may share the namespace)."""
    count = 0
    for where in namespaces:
        scheduled = await kube.list(EVENTS, namespace=where, field_selector="reason=Scheduled")
        count += sum(
            1 for e in scheduled["items"] if (e.get("involvedObject") or {}).get("name") in run.sent
        )
        own["LIST", "events", ""] += 1  # the benchmark's count of Scheduled Events
    return count


async def _end(
    plane: ControlPlane,
    kube: KubeClient,
    proc: Process,
    workload: Workload,
    run: PerfRun,
    window: _Window,
    own: Counter[tuple[str, str, str]],
    writers: PodWriters | None,
) -> None:
    """Close the measured phase: the scheduler's CPU, memory, connections and API requests (less
    the benchmark's own: its watches and lists, ``own``) over it. The CPU is read at the last
    bind, and again once the measured pods' Scheduled Events are written (at most
    :data:`EVENTS_WAIT_S` later; ``cpu_events_s``): a scheduler that writes them after its
    binds does that work after the first reading — and, in the second, also watches pods start
    that the other's first reading leaves out. The API requests are counted to then."""
    run.scheduled_events = await _scheduled_events(kube, window.namespaces, run, own)
    window.stop_churn.set()
    await asyncio.gather(*window.churning)
    run.cpu_s = cpu_seconds(proc.pid) - window.cpu0
    run.worker_cpu_s = worker_cpu_seconds(proc.pid) - window.workers0
    run.apiserver_cpu_s = cpu_seconds(plane.state.apiserver_pid) - window.api0
    began, written = time.perf_counter(), run.scheduled_events
    while written < len(run.bound) and time.perf_counter() - began < EVENTS_WAIT_S:
        await asyncio.sleep(0.25)
        written = await _scheduled_events(kube, window.namespaces, run, own)
    if written > run.scheduled_events:
        run.events_after_s = time.perf_counter() - began
        run.cpu_events_s = cpu_seconds(proc.pid) - window.cpu0
    if window.pprof is not None:
        await window.pprof
    window.connections.stop()
    run.connections_opened = window.connections.opened
    run.connections_peak = window.connections.peak
    if window.spy is not None:
        window.spy.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(window.spy.wait, 30)
    run.load = os.getloadavg()[0]
    with contextlib.suppress(psutil.Error):
        run.rss_mib = psutil.Process(proc.pid).memory_info().rss / 2**20
    run.requests = scheduler_share(window.requests0, await asyncio.to_thread(requests_total, plane))
    if writers is not None:
        run.pod_writes = writers.read()
    run.requests.subtract(own)
    if workload.dra:  # kube-controller-manager's resourceclaim controller: claims from templates
        for key in CLAIM_CONTROLLER_ROWS:
            run.requests.pop(key, None)
    if workload.steady is not None:  # the benchmark's deletes, the garbage collector's
        for key in STEADY_ROWS:
            run.requests.pop(key, None)
    run.requests = +run.requests
    if window.watcher is not None:
        window.watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await window.watcher


async def _measured_step(
    kube: KubeClient,
    proc: Process,
    run: PerfRun,
    step: Step,
    namespace: str,
    timeout_s: float,
    phases: bool,
) -> None:
    """Create the collectMetrics step's pods and wait until they are bound (or keep them
    coming for its steady state's duration)."""
    name = SCHEDULERS[run.scheduler]

    def body(i: int) -> dict[str, Any]:
        return _step_pod(step, i, f"p-{i:05d}", name)

    if step.steady_s is not None:
        run.phases = {} if phases else None
        run.window = await steady_state(
            kube, namespace, body, step.count, step.steady_s, run, run.phases
        )
        proc.check()
        run.pods, run.created_s = len(run.sent), step.steady_s
        run.timed_out = not run.bound
        return
    t0 = time.perf_counter()
    await _create(kube, namespace, [body(i) for i in range(step.count)], run.sent)
    run.created_s = time.perf_counter() - t0
    try:
        async with asyncio.timeout(timeout_s):
            while len(run.bound) < run.pods:
                proc.check()
                await asyncio.sleep(0.05)
    except TimeoutError:
        run.timed_out = True


def _pod_bodies(step: Step, first: int, scheduler: str) -> list[dict[str, Any]]:
    """An unmeasured step's pods, each rendered with its index in the step, named
    ``init-<n>`` from ``first`` on (unique in the turn)."""
    return [_step_pod(step, j, f"init-{first + j:05d}", scheduler) for j in range(step.count)]


def _step_pod(step: Step, j: int, name: str, scheduler: str) -> dict[str, Any]:
    """Pod ``j`` of the step (with its claim ``pvc-<j>`` when the step has volumes)."""
    pod = pod_body(step.template.render(j, step.count), name, scheduler)
    return pod if step.volumes is None else pod_with_claim(pod, j)


async def one_run(
    plane: ControlPlane,
    kube: KubeClient,
    proc: Process,
    workload: Workload,
    run: PerfRun,
    namespace: str,
    *,
    timeout_s: float,
    profile: Path | None = None,
    apiserver_profile: Path | None = None,
    writers: PodWriters | None = None,
    phases: bool = False,
    made: list[str] | None = None,
) -> None:
    """One scheduler's turn: the workload's ops in order (createPods steps, barriers,
    deletions, updates, the turn's Nodes — their names added to ``made``), the measured phase
    from the collectMetrics step's start (or startCollectingMetrics) to its last bind (or
    stopCollectingMetrics)."""
    spaces = namespaces_of(workload, namespace)
    objects_in = {o.namespace for o in workload.objects if o.namespace}
    for name in sorted({*spaces.values(), *objects_in}):
        await _ensure_namespace(kube, name, workload.namespace_labels.get(name))
    for obj in workload.objects:
        await create_any(kube, obj)
    for alloc in workload.allocate:  # the same devices taken in every turn
        await allocate_claims(kube, alloc, random.Random(0))
    book = PodBook(kube)
    await book.start()
    try:
        await _sequence(
            plane,
            kube,
            proc,
            workload,
            run,
            spaces,
            book,
            timeout_s=timeout_s,
            profile=profile,
            apiserver_profile=apiserver_profile,
            writers=writers,
            phases=phases,
            made=[] if made is None else made,
        )
    except WaitTimeout as exc:  # the next scheduler still gets its turn
        print(f"scheduler_perf: {run.scheduler}: {exc}: turn stopped", file=sys.stderr)
        run.timed_out = True
    finally:
        await book.stop()
    if workload.dra and workload.steady is None:  # a steady state's pods (and claims) are gone
        run.claims_allocated = await allocated_claims(kube, spaces[MEASURED_SPACE])
    if any(s.allocatable and s.allocatable.drivers for s in workload.nodes):
        run.attach = await attach_counts(kube, sorted(set(spaces.values())))


async def _sequence(
    plane: ControlPlane,
    kube: KubeClient,
    proc: Process,
    workload: Workload,
    run: PerfRun,
    spaces: Mapping[str, str],
    book: PodBook,
    *,
    timeout_s: float,
    profile: Path | None,
    apiserver_profile: Path | None,
    writers: PodWriters | None,
    phases: bool,
    made: list[str],
) -> None:
    scheduler_name = SCHEDULERS[run.scheduler]
    ordered = workload.in_order()
    start = workload.window
    begins = start or next(s for s in workload.pods if s.measured)
    before = ordered[: ordered.index(begins)]
    if not any(isinstance(i, Step) and not i.skip_wait for i in before):
        # a pod to bind before measuring: the scheduler has started (see the module doc); pods
        # not waited for (skipWaitToCompletion) do not show it
        where = spaces[WARM_UP_SPACE]
        async with contextlib.AsyncExitStack() as stack:
            if not workload.node_count:  # a Node for it, gone before the turn's first op
                await stack.enter_async_context(scratch_node(kube))
            await _create(kube, where, [pod_body(WARM_UP, "warm-up", scheduler_name)], {})
            await book.wait(where, 1, check=proc.check, timeout_s=timeout_s)
            await clear(kube, where)
    #: upstream's numPodsScheduledPerNamespace: the pods a barrier waits for, by namespace
    pending: dict[str, int] = dict.fromkeys((spaces[n] for n in workload.namespaces), 0)
    own: Counter[tuple[str, str, str]] = Counter()  # the benchmark's requests while measuring
    background: list[asyncio.Task[None]] = []
    window: _Window | None = None
    measure = functools.partial(
        _begin,
        plane,
        proc,
        workload,
        run,
        spaces,
        kube=kube,
        profile=profile,
        apiserver_profile=apiserver_profile,
        writers=writers,
    )
    index = 0
    try:
        for item in ordered:
            if isinstance(item, Step) and item.measured:
                where = spaces[MEASURED_SPACE]
                pending.setdefault(where, 0)
                if not workload.sequence:  # nothing waits on the book while measuring
                    await book.stop()
                watcher = None
                if item.steady_s is None:  # steady_state watches its own
                    listed = await kube.list(PODS, namespace=where, limit=1)
                    done = asyncio.Event()
                    watcher = asyncio.create_task(
                        watch(kube, where, listed["resourceVersion"], run, done)
                    )
                if item.volumes is not None:  # made before it (see scheduler_perf_volumes)
                    if item.steady_s is not None:
                        raise WorkloadError(f"{workload.case}: a steady state with volumes")
                    await create_volumes(kube, item.volumes, where, item.count)
                own.clear()  # from here on
                measuring = await measure([where])
                measuring.watcher = watcher
                await _measured_step(kube, proc, run, item, where, timeout_s, phases)
                own["LIST", "pods", ""] += 1  # the benchmark's own list and watch
                own["WATCH", "pods", ""] += 1
                await _end(plane, kube, proc, workload, run, measuring, own, writers)
            elif isinstance(item, Step):
                where = spaces[item.namespace or item.alias or ""]
                pending.setdefault(where, 0)
                counted = window is not None and start is not None and workload.counted(item, start)
                bodies = _pod_bodies(item, index, scheduler_name)
                index += item.count
                if item.volumes is not None:  # in a measured phase: the benchmark's requests
                    mine = own if window is not None else None
                    await create_volumes(kube, item.volumes, where, item.count, mine)
                t0 = time.perf_counter()
                await _create(kube, where, bodies, run.sent if counted else {})
                if counted:
                    run.created_s += time.perf_counter() - t0
                if item.skip_wait:
                    pending[where] += item.count
                else:
                    await book.wait(where, item.count, check=proc.check, timeout_s=timeout_s)
            elif isinstance(item, Barrier):
                names = [spaces[n] for n in item.namespaces] or list(pending)
                for where in names:
                    await book.wait(
                        where,
                        pending.get(where, 0),
                        selector=item.selector,
                        stage=item.stage,
                        check=proc.check,
                        timeout_s=timeout_s,
                    )
                if item.stage == SCHEDULED:
                    for where in names:
                        pending.pop(where, None)
            elif isinstance(item, DeletePods):
                deleting = delete_pods(kube, item, spaces[item.namespace], own)
                if item.skip_wait:
                    background.append(asyncio.create_task(deleting))
                else:
                    await deleting
            elif isinstance(item, StartMetrics):
                where_all = [spaces[n] for n in item.namespaces]
                own.clear()  # from here on
                window = await measure(where_all)
                book.record(run.bound, frozenset(where_all), item.selector)
            elif isinstance(item, StopMetrics):
                assert window is not None
                book.record(None)
                run.pods = len(run.sent)
                await _end(plane, kube, proc, workload, run, window, own, writers)
                window = None
            elif isinstance(item, TurnNodes):
                made += await create_nodes(kube, [item.step], item.first)
                own["POST", "nodes", ""] += item.step.count  # the benchmark's, not a scheduler's
                own["PATCH", "nodes", "status"] += item.step.count
                ready = workload.node_count + len(made)
                try:
                    await wait_ready(kube, ready, timeout_s=120.0, poll_s=0.1, requests=own)
                except RuntimeError as exc:  # the turn stops; the next scheduler gets its own
                    raise WaitTimeout(str(exc)) from None
            else:  # UpdateAny
                target = spaces.get(item.namespace or "", item.namespace)
                dress = functools.partial(_dressed, scheduler=scheduler_name)
                await update_any(kube, item, target, own, dress=dress)
        await asyncio.gather(*background)
    except WaitTimeout:
        if window is not None:  # what the scheduler did until then
            book.record(None)
            run.pods = len(run.sent)
            await _end(plane, kube, proc, workload, run, window, own, writers)
        raise
    finally:
        for task in background:
            task.cancel()


async def allocated_claims(kube: KubeClient, namespace: str) -> int:
    """The namespace's ResourceClaims the scheduler allocated and reserved for a pod."""
    listed = await kube.list(RESOURCE_CLAIMS, namespace=namespace)
    return sum(
        1
        for c in listed["items"]
        if (c.get("status") or {}).get("allocation") and (c.get("status") or {}).get("reservedFor")
    )


async def clear_claims(kube: KubeClient, namespace: str, timeout_s: float = 120) -> None:
    """Delete the namespace's ResourceClaims and wait until they are gone (the resourceclaim
    controller deallocates them and lifts their finalizer), so the next turn has every device."""
    await kube.delete_collection(RESOURCE_CLAIMS, namespace=namespace)
    deadline = time.perf_counter() + timeout_s
    while (await kube.list(RESOURCE_CLAIMS, namespace=namespace, limit=1))["items"]:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"ResourceClaims of {namespace} not gone in {timeout_s} s")
        await asyncio.sleep(0.2)


def _ms(value: float) -> int | None:
    return None if math.isnan(value) else round(value)  # no pod bound: no latency


def alternated(order: Sequence[str], repeat: int) -> list[str]:
    """``repeat`` rounds of ``order``, every other one reversed (kube, topos, topos, kube, …):
    neither scheduler is always the one measured first."""
    if repeat < 1:
        raise WorkloadError(f"--repeat {repeat}: give at least one round")
    out: list[str] = []
    for r in range(repeat):
        out += order if r % 2 == 0 else reversed(order)
    return out


@dataclass(frozen=True, slots=True)
class Ratio:
    """Topos ÷ kube-scheduler in one round (or the median of the rounds')."""

    pods_per_s: float
    cpu_per_pod: float
    requests_per_pod: float
    #: bound pods/s over the rate the run's pods were created at (:attr:`Run.kept_up`): both
    #: schedulers bind about as fast as the benchmark creates, which moves from run to run
    kept_up: float

    def line(self, what: str) -> str:
        return (
            f"Topos/kube-scheduler{what}: pods/s {self.pods_per_s:.2f}x (of the creation rate "
            f"{self.kept_up:.2f}x), CPU per pod {self.cpu_per_pod:.2f}x, requests per pod "
            f"{self.requests_per_pod:.2f}x"
        )


def round_ratios(runs: Sequence[PerfRun], per_round: int) -> list[Ratio]:
    """Each round's (``per_round`` runs in turn) Topos ÷ kube-scheduler; none where a round lacks
    either scheduler or kube-scheduler bound nothing."""
    out: list[Ratio] = []
    for r in range(0, len(runs) - per_round + 1, per_round):
        by = {run.scheduler: run for run in runs[r : r + per_round]}
        kube, topos = by.get("kube-scheduler"), by.get("topos")
        if kube is None or topos is None or not kube.rate:
            continue
        out.append(
            Ratio(
                topos.rate / kube.rate,
                topos.cpu_ms_per_pod / max(kube.cpu_ms_per_pod, 1e-9),
                topos.requests_per_pod / max(kube.requests_per_pod, 1e-9),
                topos.kept_up / kube.kept_up,
            )
        )
    return out


def median_ratio(ratios: Sequence[Ratio]) -> Ratio:
    """Each figure's median over the rounds (taken apart: not one round's three)."""
    return Ratio(
        statistics.median(r.pods_per_s for r in ratios),
        statistics.median(r.cpu_per_pod for r in ratios),
        statistics.median(r.requests_per_pod for r in ratios),
        statistics.median(r.kept_up for r in ratios),
    )


def row(run: PerfRun) -> dict[str, Any]:
    return {
        "scheduler": run.scheduler,
        "pods": run.pods,
        "bound": len(run.bound),
        "binds": run.requests["POST", "pods", "binding"],  # earlier ops' pods' too
        "pods_per_s": round(run.rate, 1),
        "p50_ms": _ms(run.latency_ms(50)),
        "p99_ms": _ms(run.latency_ms(99)),
        "cpu_ms_per_pod": round(run.cpu_ms_per_pod, 2),
        "requests_per_pod": round(run.requests_per_pod, 2),
        "rss_mib": round(run.rss_mib),
        "created_per_s": round(run.create_rate),
        "kept_up": round(run.kept_up, 3),
        "connections_opened": run.connections_opened,
        "scheduled_events": run.scheduled_events,
        "events_after_s": round(run.events_after_s, 2),
        "cpu_events_s": round(run.cpu_events_s, 3),
        "timed_out": run.timed_out,
        **({} if run.claims_allocated is None else {"claims_allocated": run.claims_allocated}),
        **({"attach": [dataclasses.asdict(a) for a in run.attach]} if run.attach else {}),
        **(
            {}
            if run.phases is None
            else {
                "phases_ms": {
                    label: round(ms, 1)
                    for label, ms in phase_medians(run.sent, run.phases, run.bound)
                }
            }
        ),
    }


async def bench(
    workload: Workload,
    *,
    limit: Limit,
    order: Sequence[str],
    timeout_s: float,
    profile: Path | None = None,
    binds: int = 64,
    audit: bool = False,
    phases: bool = False,
) -> list[PerfRun]:
    binaries = ensure(extra=True, log=False)
    work = Path(tempfile.mkdtemp(prefix="topos-sched-perf-"))
    writers = PodWriters(work / "audit.log") if audit else None
    plane = ControlPlane.start(
        binaries=binaries,
        settings=ControlPlaneSettings(
            # upstream's runner runs both: a deleted pod's generated claims are deleted
            controllers=(
                ("resourceclaim-controller", "garbage-collector-controller")
                if workload.steady
                else ("resourceclaim-controller",)
                if workload.dra
                else ()
            ),
            extra_apiserver_args=(
                *PERF_APISERVER_ARGS,
                *(["--profiling=true"] if profile is not None else []),
                *(audit_args(work, writes=True) if audit else ()),
            ),
            extra_controller_args=CONTROLLER_ARGS,
        ),
    )
    kwok: Process | None = None
    runs: list[PerfRun] = []
    try:
        kube = await KubeClient.connect(plane.kubeconfig)
        try:
            kwok = start_kwok(binaries, plane, work)
            compile_topos()
            names = await create_nodes(kube, workload.nodes)
            await wait_ready(kube, workload.node_count)
            for driver in workload.drivers:
                await publish_slices(kube, driver)
            # The API server quiet after the Nodes, and the pod path warmed (see the module doc).
            await settle(plane)
            async with contextlib.AsyncExitStack() as stack:
                if not names:  # all the workload's Nodes are made in the turns
                    names = [await stack.enter_async_context(scratch_node(kube))]
                warmed = await warm_up(
                    plane, kube, len(names), workload.measured_pods, node=names.__getitem__
                )
            print(f"scheduler_perf: {warmed.summary()}", file=sys.stderr)
            for i, name in enumerate(order):
                tag = f"{name}-{i}"
                if name == "kube-scheduler":
                    proc = start_kube_scheduler(binaries, plane, work, limit, tag)
                else:
                    proc = start_topos(plane, work, limit, tag, binds=binds)
                run = PerfRun(name, limit, workload.measured_pods)
                namespace = f"perf-{tag}"
                made: list[str] = []  # the turn's Nodes
                try:
                    spy = None
                    if profile is not None and name == "topos":
                        spy = profile / f"topos-{tag}.txt"
                    await one_run(
                        plane,
                        kube,
                        proc,
                        workload,
                        run,
                        namespace,
                        timeout_s=timeout_s,
                        profile=spy,
                        apiserver_profile=(
                            None if profile is None else profile / f"apiserver-{tag}.pprof"
                        ),
                        writers=writers,
                        phases=phases,
                        made=made,
                    )
                finally:
                    proc.stop()
                runs.append(run)
                spaces = set(namespaces_of(workload, namespace).values())
                for where in sorted(spaces):
                    await drop_finalizers(kube, where)
                    await clear(kube, where)
                    # a namespace the workload names is the next turn's too: its Events would
                    # count as that turn's (same pod names)
                    await kube.delete_collection(EVENTS, namespace=where)
                await delete_nodes(kube, made)  # the next turn makes them again
                made.clear()
                if any(s.volumes for s in workload.pods):
                    await clear_volumes(kube, sorted(spaces))
                for where in sorted(
                    spaces | {o.namespace for o in workload.objects if o.namespace}
                ):
                    if workload.dra:
                        await clear_claims(kube, where)
        finally:
            await kube.close()
    finally:
        if kwok is not None:
            kwok.stop()
        plane.stop()
        shutil.rmtree(work, ignore_errors=True)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scheduler_perf")
    ap.add_argument(
        "--config",
        default="misc/performance-config.yaml",
        help=f"under {PERF_DIR}/ in the module, or a path",
    )
    ap.add_argument("--case", default="SchedulingBasic")
    ap.add_argument("--workload", default="500Nodes")
    ap.add_argument("--limit", default="unlimited", help="client QPS/burst, e.g. 50/100")
    ap.add_argument("--order", default="kube-scheduler,topos")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of --order, every other one reversed; prints each round's ratios and "
        "their median",
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per measured run")
    ap.add_argument(
        "--binds",
        type=int,
        default=64,
        help="Topos' scheduler.maxBindsInFlight (its default: 64)",
    )
    ap.add_argument(
        "--param",
        action="append",
        default=[],
        help="name=value (a count, true/false or a duration): override a workload parameter",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        help="a folder: py-spy records the coordinator during its measured phase (raw stacks), "
        f"and the API server's pprof covers the first {APISERVER_PROFILE_S} s of each run's",
    )
    ap.add_argument(
        "--audit",
        action="store_true",
        help="the API server audits pod writes: each run's measured phase counts them by client "
        "(the request counts leave pods/status out: KWOK's Running writes share the row)",
    )
    ap.add_argument(
        "--phases",
        action="store_true",
        help="a steady state: when each pod's claim is made, named in the pod, protected and "
        "allocated, and the pod bound (a watch of the claims too; p50 ms after the create)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    order = [x.strip() for x in args.order.split(",") if x.strip()]
    unknown = [x for x in order if x not in SCHEDULERS]
    if unknown:
        ap.error(f"--order: {unknown[0]!r} is not a scheduler here ({', '.join(SCHEDULERS)})")
    try:
        runs_order = alternated(order, args.repeat)
    except WorkloadError as exc:
        ap.error(str(exc))
    limits = parse_limits(args.limit)
    if len(limits) != 1:
        ap.error(f"--limit: {args.limit!r}: give one limit")
    config = Path(args.config)
    if not config.is_file():
        config = module_dir() / PERF_DIR / args.config
    try:
        overrides = parse_params(args.param)
        workload = load_workload(config, args.case, args.workload, overrides)
    except WorkloadError as exc:
        print(f"scheduler_perf: {exc}", file=sys.stderr)
        return 2
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    runs = asyncio.run(
        bench(
            workload,
            limit=limits[0],
            order=runs_order,
            timeout_s=args.timeout,
            profile=args.profile,
            binds=args.binds,
            audit=args.audit,
            phases=args.phases,
        )
    )
    rows = [row(r) for r in runs]
    rounds = round_ratios(runs, len(order))
    median = median_ratio(rounds) if rounds else None
    if args.json:
        print(
            json.dumps(
                {
                    "case": workload.case,
                    "workload": workload.name,
                    "params": overrides,
                    "runs": rows,
                    "rounds": [dataclasses.asdict(r) for r in rounds],
                    **({} if median is None else {"median": dataclasses.asdict(median)}),
                }
            )
        )
    else:
        print(
            f"scheduler_perf {workload.case}/{workload.name}: {workload.node_count} KWOK nodes"
            f" (+{sum(t.step.count for t in workload.turn_nodes)} made in each turn), "
            f"{workload.measured_pods} measured pods, client {limits[0].label} "
            f"(Kubernetes v{KUBERNETES_VERSION})"
            + (f", params overridden: {overrides}" if overrides else "")
        )
        for r in runs:
            print(r.summary())
            print(
                f"{'':14s} connections to the API server opened {r.connections_opened} "
                f"(at most {r.connections_peak} at once); Scheduled Events at the last bind "
                f"{r.scheduled_events}/{len(r.bound)}"
                + (
                    f", the rest within {r.events_after_s:.1f} s: CPU to then "
                    f"{1000 * r.cpu_events_s / max(1, len(r.bound)):.2f} ms/pod"
                    if r.events_after_s
                    else ""
                )
            )
            binds = r.requests["POST", "pods", "binding"]
            if binds > len(r.bound):  # pods of the ops before, bound in the measured phase
                print(
                    f"{'':14s} {binds} binds in the measured phase, {binds - len(r.bound)} of "
                    f"them of earlier ops' pods: CPU per bind {1000 * r.cpu_s / binds:.2f} ms"
                )
            if r.pod_writes is not None:
                print(f"{'':14s} pod writes by client: {PodWriters.summary(r.pod_writes)}")
            for count in r.attach:
                print(f"{'':14s} {count.line()}")
            if r.claims_allocated is not None:
                print(
                    f"               claims allocated and reserved: {r.claims_allocated} "
                    f"(of {r.pods} measured pods)"
                )
        if len(rounds) > 1:
            for i, ratio in enumerate(rounds):
                print(ratio.line(f" round {i + 1}, {runs_order[i * len(order)]} first"))
        if median is not None:
            print(median.line(f" (median of {len(rounds)})" if len(rounds) > 1 else ""))
    return 1 if any(r.timed_out for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
