"""KAI Scheduler's gang cases on KWOK nodes (500 by default): Topos and kube-scheduler 1.36's gang
scheduling in one run, on the same API server and nodes, beside KAI's published figures.

KAI's scale test (``test/e2e/scale`` in NVIDIA/KAI-Scheduler) runs on 500 KWOK nodes of 8 GPUs;
its figures, as issue 33 quotes them: a 512-pod distributed job with a topology constraint
scheduled in 49 s, a gang that cannot be placed declared unschedulable after 249.5 s, and room for
a 4,000-GPU job reclaimed in 85 s. The shapes here are KAI's, scaled with ``--nodes``:

1. **topology**: one gang of 512 pods (``512 × nodes / 500``) of 2 GPUs each (KAI's topology
   test), required to sit in one spine (``topos.io/spine``; a spine is half the cluster, the gang
   needs 1,024 of its 2,000 GPUs). As KAI measures it, everything is created with no scheduler
   running, then the scheduler is started: the figure runs from its start to the last member
   bound, start-up included. The members must all land in one spine.
2. **unschedulable**: the cluster full of 8-GPU pods (one per node, bound by the benchmark), then
   a gang of 10 × 8 GPUs (KAI's ``defaultPodsPerDistributedJob``) of the same priority, so no
   preemption can make room (KAI: a reclaim its queue's quota forbids). The figure runs from the
   PodGroup's create to the first unschedulable verdict the user sees: the PodGroup's
   ``PodGroupScheduled=False`` (reason ``Unschedulable``) or a member's ``PodScheduled=False``
   (reason ``Unschedulable``), whichever comes first; a message that only waits for the members
   to exist does not count.
3. **reclaim**: the cluster full of low-priority 8-GPU pods, then a gang of one 8-GPU pod per
   node (4,000 GPUs at 500 nodes: the whole cluster) of higher priority: PodGroup create → every
   member bound (every filler preempted; KWOK deletes them). The note gives the phases (first
   victim gone, all gone, first member bound) and the API server's requests meanwhile.

Before the unschedulable and reclaim cases each scheduler must bind a probe pod (no GPU), so
that a run without the topology case does not time the scheduler's start-up.

Every gang speaks Kubernetes' Workload API (``scheduling.k8s.io/v1alpha2``): a ``PodGroup``
with ``schedulingPolicy.gang.minCount``, its members naming it in ``spec.schedulingGroup``, so
kube-scheduler (feature gates ``GenericWorkload``, ``GangScheduling``,
``TopologyAwareWorkloadScheduling`` and ``WorkloadAwarePreemption``, on it and on the API server)
and Topos read the same objects, the topology constraint included (the PodGroup's
``spec.schedulingConstraints.topology``; the pods carry no Topos key). Each scheduler runs alone
(kube-scheduler first), with no client-side rate limit; after its cases its pods are deleted, so
the next starts on the same empty nodes.

    .venv/bin/python -m benchmarks.kai_gangs [--nodes 500] [--cases topology,unschedulable,reclaim]
        [--schedulers kube-scheduler,topos] [--timeout 300] [--profile DIR] [--keep] [--json]
        [--audit]

``--audit``: the API server keeps an audit log of pod writes, and the reclaim case's note counts
them by client (``bench-topos``, ``kwok-controller``, ``topos-admin`` the benchmark itself):
``patch pods/status`` in the request counter lumps KWOK's Running writes with the scheduler's.

Needs ``python -m devcluster.binaries ensure --all`` (kube-scheduler, kwok, stages).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.apiserver_metrics import by_kind, requests_total
from benchmarks.kwok_audit import PodWriters, audit_args
from benchmarks.kwok_cluster import (
    LEAVES_PER_SPINE,
    Fabric,
    Limit,
    Process,
    kwok_cluster,
    node_name,
    start_kube_scheduler,
    start_profiler,
    start_topos,
)
from benchmarks.kwok_settle import clear, settle
from benchmarks.kwok_throughput import say
from benchmarks.run_all import machine
from common.kube import NAMESPACES, PODS, KubeClient, KubeError
from common.kube.resources import Resource
from common.podkeys import GPU_RESOURCE
from devcluster.binaries import KUBERNETES_VERSION
from devcluster.controlplane import ControlPlane

KubeObject = dict[str, Any]

#: KAI's published figures (seconds), as issue 33 quotes them, and the goal: 10× better.
KAI_S = {"topology": 49.0, "unschedulable": 249.5, "reclaim": 85.0}
CASES = tuple(KAI_S)
SCHEDULERS = {"kube-scheduler": "default-scheduler", "topos": "topos"}

POD_GROUPS = Resource(
    "scheduling.k8s.io", "v1alpha2", "podgroups", namespaced=True, kind="PodGroup"
)
PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False, kind="PriorityClass"
)
#: The alpha gates kube-scheduler 1.36 needs for gangs, their topology and their preemption.
GATES = (
    "GenericWorkload=true,GangScheduling=true,"
    "TopologyAwareWorkloadScheduling=true,WorkloadAwarePreemption=true"
)
LEAVES = 16  # so the cluster has two spines (LEAVES_PER_SPINE leaves each) at any size
SPINE_LABEL = "topos.io/spine"
LOW, HIGH = "kai-bench-low", "kai-bench-high"
CREATORS = 32
UNSCHEDULABLE_GANG = 10  # KAI's defaultPodsPerDistributedJob


@dataclass
class Result:
    case: str
    scheduler: str
    pods: int
    seconds: float | None = None  # None: not reached within the timeout
    note: str = ""
    checks: list[str] = field(default_factory=list)  # what the user would notice went wrong

    @property
    def ok(self) -> bool:
        return self.seconds is not None and not self.checks

    def summary(self) -> str:
        took = "timed out" if self.seconds is None else f"{self.seconds:.2f} s"
        bad = f"; WRONG: {'; '.join(self.checks)}" if self.checks else ""
        return (
            f"{self.scheduler:>14s} {self.case:<13s} {self.pods:>5,} pods: {took}; {self.note}{bad}"
        )


class Tracker:
    """The objects of one type in one namespace, kept current by a list and a watch; ``until``
    answers when a predicate over them first holds (``time.perf_counter()``)."""

    def __init__(self, kube: KubeClient, resource: Resource, namespace: str) -> None:
        self.kube, self.resource, self.namespace = kube, resource, namespace
        self.objects: dict[str, KubeObject] = {}
        self._waiting: list[tuple[Callable[[dict[str, KubeObject]], bool], asyncio.Future[float]]]
        self._waiting = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.kube.list(self.resource, namespace=self.namespace)
        self.objects = {o["metadata"]["name"]: o for o in listed["items"]}
        self._task = asyncio.create_task(self._follow(listed["resourceVersion"]))

    async def _follow(self, rv: str) -> None:
        while True:
            try:
                async for kind, obj in self.kube.watch(
                    self.resource, namespace=self.namespace, resource_version=rv
                ):
                    meta = obj["metadata"]
                    rv = meta.get("resourceVersion") or rv
                    if kind == "DELETED":
                        self.objects.pop(meta["name"], None)
                    elif kind in ("ADDED", "MODIFIED"):
                        self.objects[meta["name"]] = obj
                    self._check()
            except KubeError as exc:
                print(f"watch of {self.resource.plural} broke ({exc}); resuming", file=sys.stderr)

    def _check(self) -> None:
        now = time.perf_counter()
        for pred, fut in list(self._waiting):
            if not fut.done() and pred(self.objects):
                fut.set_result(now)
        self._waiting = [(p, f) for p, f in self._waiting if not f.done()]

    async def until(
        self, pred: Callable[[dict[str, KubeObject]], bool], timeout_s: float
    ) -> float | None:
        if pred(self.objects):
            return time.perf_counter()
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting.append((pred, fut))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


# --- the objects ---------------------------------------------------------------------------


def pod_group(
    name: str, min_count: int, *, topology_key: str = "", priority_class: str = ""
) -> KubeObject:
    spec: KubeObject = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def member(name: str, scheduler: str, group: str, gpus: int, priority_class: str) -> KubeObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai-bench/group": group}},
        "spec": {
            "schedulerName": scheduler,
            "schedulingGroup": {"podGroupName": group},
            "priorityClassName": priority_class,
            "containers": [_container(gpus)],
        },
    }


def filler(index: int) -> KubeObject:
    """An 8-GPU low-priority pod put straight on node ``index`` (no scheduler places it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"fill-{index:05d}", "labels": {"kai-bench/group": "fill"}},
        "spec": {
            "schedulerName": "kai-bench-fill",
            "nodeName": node_name(index),
            "priorityClassName": LOW,
            "terminationGracePeriodSeconds": 0,
            "containers": [_container(8)],
        },
    }


def _container(gpus: int) -> KubeObject:
    return {
        "name": "main",
        "image": "registry.example/train:1",
        "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {GPU_RESOURCE: str(gpus)},
        },
    }


# --- predicates over the watched objects ----------------------------------------------------


def bound(count: int) -> Callable[[dict[str, KubeObject]], bool]:
    return lambda pods: sum(1 for p in pods.values() if p["spec"].get("nodeName")) >= count


def fewer(count: int) -> Callable[[dict[str, KubeObject]], bool]:
    return lambda objs: len(objs) < count


def running(count: int) -> Callable[[dict[str, KubeObject]], bool]:
    return lambda pods: (
        sum(1 for p in pods.values() if (p.get("status") or {}).get("phase") == "Running") >= count
    )


def _verdict(obj: KubeObject, kind: str) -> str | None:
    """The message of an Unschedulable ``kind`` condition that is a verdict on the gang (not a
    wait for its members to exist), or None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if (
            c.get("type") == kind
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ):
            message = str(c.get("message", ""))
            if "exist" not in message:
                return message
    return None


def said_unschedulable(kind: str, group: str) -> Callable[[dict[str, KubeObject]], bool]:
    """A verdict on ``group`` (the PodGroup itself, or one of its members)."""
    return lambda objs: any(_verdict(o, kind) is not None for o in _of(objs, group))


def _of(objs: dict[str, KubeObject], group: str) -> list[KubeObject]:
    return [
        o
        for name, o in objs.items()
        if name == group or (o["metadata"].get("labels") or {}).get("kai-bench/group") == group
    ]


# --- the run ---------------------------------------------------------------------------------


@dataclass
class Bench:
    plane: ControlPlane
    kube: KubeClient
    work: Path
    binaries: Any
    nodes: int
    timeout_s: float
    profile: str
    spines: dict[str, str] = field(default_factory=dict)  # node → spine
    writers: PodWriters | None = None  # ``--audit``: the pod writes by client

    def launch(self, scheduler: str, tag: str) -> tuple[Process, list[subprocess.Popen[bytes]]]:
        unlimited = Limit(qps=0, burst=1)
        if scheduler == "kube-scheduler":
            proc = start_kube_scheduler(
                self.binaries, self.plane, self.work, unlimited, tag, feature_gates=GATES
            )
            return proc, []
        proc = start_topos(self.plane, self.work, unlimited, tag, binds=64)
        spy = start_profiler(proc.pid, Path(self.profile) / f"{tag}.txt") if self.profile else None
        return proc, [spy] if spy else []

    async def create_all(self, bodies: Sequence[KubeObject], namespace: str) -> None:
        sem = asyncio.Semaphore(CREATORS)

        async def one(body: KubeObject) -> None:
            async with sem:
                await self.kube.create(PODS, body, namespace=namespace)

        await asyncio.gather(*(one(b) for b in bodies))

    async def serving(self, scheduler: str, namespace: str) -> float:
        """Wait until ``scheduler`` binds a pod (it has started and synced), so that a case timed
        from a create does not time the scheduler's start-up: a pod of no GPU, deleted after."""
        t0 = time.perf_counter()
        pods = Tracker(self.kube, PODS, namespace)
        await pods.start()
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "labels": {"kai-bench/group": "probe"}},
            "spec": {
                "schedulerName": SCHEDULERS[scheduler],
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "registry.example/probe:1"}],
            },
        }
        await self.kube.create(PODS, probe, namespace=namespace)
        if await pods.until(bound(1), self.timeout_s) is None:
            raise RuntimeError(f"{scheduler} bound no probe pod within {self.timeout_s:.0f} s")
        await pods.stop()
        await clear(self.kube, namespace)
        return time.perf_counter() - t0

    async def namespace(self, name: str) -> str:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await self.kube.create(NAMESPACES, body)
        return name

    async def drop(self, namespace: str) -> None:
        await self.kube.delete_collection(POD_GROUPS, namespace=namespace)
        await clear(self.kube, namespace)

    async def topology(
        self, scheduler: str, namespace: str, tag: str
    ) -> tuple[Result, Process, list[subprocess.Popen[bytes]]]:
        size = max(2, round(512 * self.nodes / 500))
        name = SCHEDULERS[scheduler]
        await self.kube.create(
            POD_GROUPS, pod_group("topo", size, topology_key=SPINE_LABEL), namespace=namespace
        )
        await self.create_all(
            [member(f"topo-{i:04d}", name, "topo", 2, LOW) for i in range(size)],
            namespace,
        )
        pods = Tracker(self.kube, PODS, namespace)
        await pods.start()
        t0 = time.perf_counter()
        proc, spy = self.launch(scheduler, tag)
        first = asyncio.ensure_future(pods.until(bound(1), self.timeout_s))
        done = await pods.until(bound(size), self.timeout_s)
        first_s = await first
        await pods.stop()
        result = Result("topology", scheduler, size)
        if done is not None:
            result.seconds = done - t0
            places = {p["spec"]["nodeName"] for p in pods.objects.values()}
            spines = sorted({self.spines[n] for n in places})
            result.note = (
                f"start → first bind {(first_s or t0) - t0:.2f} s; {len(places)} nodes in "
                f"{', '.join(spines)}"
            )
            if len(spines) != 1:
                result.checks.append(f"the gang spans {len(spines)} spines, required one")
        await self.drop(namespace)
        return result, proc, spy

    async def fill(self, namespace: str) -> None:
        pods = Tracker(self.kube, PODS, namespace)
        await pods.start()
        await self.create_all([filler(i) for i in range(self.nodes)], namespace)
        if await pods.until(running(self.nodes), self.timeout_s) is None:
            raise RuntimeError(f"the {self.nodes} filler pods were not Running in time")
        await pods.stop()

    async def unschedulable(self, scheduler: str, namespace: str) -> Result:
        name = SCHEDULERS[scheduler]
        pods = Tracker(self.kube, PODS, namespace)
        groups = Tracker(self.kube, POD_GROUPS, namespace)
        await pods.start()
        await groups.start()
        t0 = time.perf_counter()
        await self.kube.create(
            POD_GROUPS,
            pod_group("stuck", UNSCHEDULABLE_GANG, priority_class=LOW),
            namespace=namespace,
        )
        await self.create_all(
            [member(f"stuck-{i:02d}", name, "stuck", 8, LOW) for i in range(UNSCHEDULABLE_GANG)],
            namespace,
        )
        on_pod = asyncio.ensure_future(
            pods.until(said_unschedulable("PodScheduled", "stuck"), self.timeout_s)
        )
        on_group = asyncio.ensure_future(
            groups.until(said_unschedulable("PodGroupScheduled", "stuck"), self.timeout_s)
        )
        await asyncio.wait([on_pod, on_group], return_when=asyncio.FIRST_COMPLETED)
        # the other signal gets a few seconds more, to say whether it comes at all
        for fut in (on_pod, on_group):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), 5.0)
        times = {
            "member PodScheduled": on_pod.result() if on_pod.done() else None,
            "PodGroupScheduled": on_group.result() if on_group.done() else None,
        }
        for fut in (on_pod, on_group):
            fut.cancel()
        await pods.stop()
        await groups.stop()
        result = Result("unschedulable", scheduler, UNSCHEDULABLE_GANG)
        seen = {k: v - t0 for k, v in times.items() if v is not None}
        if seen:
            result.seconds = min(seen.values())
            message = next(
                (
                    m
                    for o in [*_of(groups.objects, "stuck"), *_of(pods.objects, "stuck")]
                    for m in [_verdict(o, "PodGroupScheduled") or _verdict(o, "PodScheduled")]
                    if m
                ),
                "",
            )
            result.note = "; ".join(
                [
                    *(f"{k} after {v:.2f} s" for k, v in seen.items()),
                    *(f"no {k} verdict" for k in times if k not in seen),
                    f"says: {message[:160]!r}",
                ]
            )
        placed = [
            n
            for n, p in pods.objects.items()
            if p["spec"].get("nodeName") and n.startswith("stuck-")
        ]
        if placed:
            result.checks.append(f"{len(placed)} members bound")
        await self.kube.delete_collection(POD_GROUPS, namespace=namespace)
        await self.kube.delete_collection(
            PODS,
            namespace=namespace,
            label_selector="kai-bench/group=stuck",
            grace_period_seconds=0,
        )
        return result

    async def reclaim(self, scheduler: str, namespace: str, fill_namespace: str) -> Result:
        name = SCHEDULERS[scheduler]
        pods = Tracker(self.kube, PODS, namespace)
        fillers = Tracker(self.kube, PODS, fill_namespace)
        await pods.start()
        await fillers.start()
        before = await asyncio.to_thread(requests_total, self.plane)
        if self.writers is not None:
            self.writers.read()  # from here on
        t0, began = time.perf_counter(), time.strftime("%H:%M:%S", time.gmtime())
        await self.kube.create(
            POD_GROUPS, pod_group("big", self.nodes, priority_class=HIGH), namespace=namespace
        )
        await self.create_all(
            [member(f"big-{i:04d}", name, "big", 8, HIGH) for i in range(self.nodes)], namespace
        )
        created = time.perf_counter() - t0
        # the phases: the first victim gone (the decision), every victim gone, the first bind
        phases = {
            "first victim gone": fillers.until(fewer(self.nodes), self.timeout_s),
            "all victims gone": fillers.until(fewer(1), self.timeout_s),
            "first member bound": pods.until(bound(1), self.timeout_s),
        }
        watching = {k: asyncio.ensure_future(v) for k, v in phases.items()}
        done = await pods.until(bound(self.nodes), self.timeout_s)
        result = Result("reclaim", scheduler, self.nodes)
        made = await asyncio.to_thread(requests_total, self.plane)
        made.subtract(before)
        writes = ""
        if self.writers is not None:
            writes = (
                f"; pod writes meanwhile by client: {self.writers.summary(self.writers.read())}"
            )
        left = len(fillers.objects)
        seen: dict[str, float] = {}
        for what, fut in watching.items():
            if not fut.done():
                fut.cancel()
            elif (at := fut.result()) is not None:
                seen[what] = at - t0
        await pods.stop()
        await fillers.stop()
        placed = sum(1 for p in pods.objects.values() if p["spec"].get("nodeName"))
        result.seconds = None if done is None else done - t0
        result.note = (
            f"{self.nodes * 8:,} GPUs; began {began} UTC; creates took {created:.2f} s; "
            f"{placed:,} members bound; "
            f"{self.nodes - left:,} of {self.nodes:,} fillers gone"
            + "".join(f"; {what} at {at:.2f} s" for what, at in seen.items())
            + f"; API requests meanwhile (all clients): {by_kind(+made)}"
            + writes
        )
        return result


async def bench(args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    cases = [c for c in CASES if c in args.cases.split(",")]
    fabric = Fabric(nodes=args.nodes, leaves=LEAVES)
    gates = "--feature-gates=TopologyAwareWorkloadScheduling=true,WorkloadAwarePreemption=true"
    async with kwok_cluster(
        "topos-kai-",
        args.nodes,
        apiserver_args=lambda work: (gates, *(audit_args(work, writes=True) if args.audit else ())),
        fabric=fabric,
        keep=args.keep,
    ) as cluster:
        binaries, work, plane, kube = cluster.binaries, cluster.work, cluster.plane, cluster.kube
        ready = cluster.ready_s
        quiet = await settle(plane)
        for value, pc in ((1000, LOW), (100000, HIGH)):
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc},
                "value": value,
            }
            await kube.create(PRIORITY_CLASSES, body)
        say(
            args,
            f"{args.nodes} KWOK nodes (8 GPUs each, {LEAVES} leaves, 2 spines) Ready in "
            f"{ready:.1f}s, quiet {quiet:.1f}s after",
        )
        b = Bench(plane, kube, work, binaries, args.nodes, args.timeout, args.profile)
        if args.audit:
            b.writers = PodWriters(work / "audit.log")
        b.spines = {
            node_name(i): f"spine-{fabric.leaf(i) // LEAVES_PER_SPINE}" for i in range(args.nodes)
        }
        for k, scheduler in enumerate(args.schedulers.split(",")):
            ns = await b.namespace(f"kai-{k}")
            fill_ns = f"kai-fill-{k}"
            proc: Process | None = None
            spy: list[subprocess.Popen[bytes]] = []
            try:
                if "topology" in cases:
                    r, proc, spy = await b.topology(scheduler, ns, f"{scheduler}-{k}")
                    results.append(r)
                    say(args, r.summary())
                else:
                    proc, spy = b.launch(scheduler, f"{scheduler}-{k}")
                if {"unschedulable", "reclaim"} & set(cases):
                    await b.namespace(fill_ns)
                    await b.fill(fill_ns)
                    up = await b.serving(scheduler, ns)
                    say(args, f"{scheduler} binds (a probe pod bound {up:.2f} s after its create)")
                for case in ("unschedulable", "reclaim"):
                    if case not in cases:
                        continue
                    proc.check()
                    r = await (
                        b.unschedulable(scheduler, ns)
                        if case == "unschedulable"
                        else b.reclaim(scheduler, ns, fill_ns)
                    )
                    results.append(r)
                    say(args, r.summary())
            finally:
                for p in spy:
                    p.send_signal(2)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(20)
                if proc is not None:
                    proc.stop()
            await b.drop(ns)
            if {"unschedulable", "reclaim"} & set(cases):
                await clear(kube, fill_ns)
    return results


WHAT = {
    "topology": "{pods}-pod gang (2 GPUs each) required in one spine: scheduler start → all bound",
    "unschedulable": "{pods} × 8-GPU gang on a full cluster, no preemption possible: "
    "create → unschedulable said",
    "reclaim": "{pods} × 8-GPU gang ({gpus:,} GPUs) over low-priority pods filling every GPU: "
    "create → all bound",
}


def rows(results: Sequence[Result], nodes: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for case in CASES:
        by = {r.scheduler: r for r in results if r.case == case}
        topos, kube = by.get("topos"), by.get("kube-scheduler")
        if topos is None:
            continue
        kai = KAI_S[case]

        def fig(r: Result | None, kai: float = kai) -> str:
            if r is None:
                return "not run"
            if r.seconds is None:
                return "timed out"
            return f"{r.seconds:.2f} s ({kai / max(r.seconds, 1e-9):.1f}× better than KAI)" + (
                " WRONG" if r.checks else ""
            )

        out.append(
            {
                "case": f"KAI {case}, {nodes:,} KWOK nodes: "
                + WHAT[case].format(pods=topos.pods, gpus=topos.pods * 8),
                "figure": "seconds",
                "topos": fig(topos),
                "baseline": f"kube-scheduler v{KUBERNETES_VERSION}: {fig(kube)}; "
                f"KAI published {kai:g} s",
                "goal": f"≤ {kai / 10:g} s (10× KAI)",
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--schedulers", default="kube-scheduler,topos")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    ap.add_argument("--profile", default="", help="py-spy the coordinator into this directory")
    ap.add_argument("--keep", action="store_true", help="keep the logs and configs")
    ap.add_argument(
        "--audit",
        action="store_true",
        help="the API server audits pod writes: reclaim's note counts them by client",
    )
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    if args.nodes < LEAVES:
        ap.error(f"--nodes must be at least {LEAVES} (one node a leaf), got {args.nodes}")
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown:
        ap.error(f"--cases: unknown {', '.join(unknown)}; expected some of {', '.join(CASES)}")
    bad = [s for s in args.schedulers.split(",") if s not in SCHEDULERS]
    if bad:
        ap.error(
            f"--schedulers: unknown {', '.join(bad)}; expected some of {', '.join(SCHEDULERS)}"
        )
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    info = machine()
    say(args, f"machine: {info['CPU']}, {info['cores']}, {info['memory']}, {info['Python']}")
    started = time.perf_counter()
    results = asyncio.run(bench(args))
    table = rows(results, args.nodes)
    notes = [
        f"machine: {info['CPU']}, {info['cores']}; "
        f"load average {os.getloadavg()[0]:.1f} after the run",
        *(r.summary() for r in results),
        f"whole benchmark {time.perf_counter() - started:.0f} s",
    ]
    if args.json:
        print(json.dumps({"rows": table, "notes": notes, "results": [r.__dict__ for r in results]}))
    else:
        for r in table:
            print(f"{r['case']}: Topos {r['topos']}; {r['baseline']}; goal {r['goal']}")
        print(notes[0])
    return 0 if all(r.ok for r in results if r.scheduler == "topos") else 1


if __name__ == "__main__":
    sys.exit(main())
