"""The runs of ``benchmarks/kwok_workloads.py``: the sizes, a watch telling each pod to its gang
and slice and when it was created and bound, one workload alone on the empty cluster, the three at
once on a cluster filled but for a few NVLink domains, and the clean-up between runs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.kwok_cluster import (
    Fabric,
    Process,
    node_name,
)
from benchmarks.kwok_workload_objects import (
    JOB_PODS,
    JOBSETS,
    LEADER_WORKER_SETS,
    LWS_SIZE,
    RAY_CLUSTERS,
    Membership,
    jobset,
    leader_worker_set,
    membership,
    ray_cluster,
)
from common.kube import NAMESPACES, PODS, KubeClient, KubeError, NotFound, Resource
from common.podkeys import GPU_RESOURCE

SCHEDULERS = {"kube-scheduler": "default-scheduler", "topos": "topos"}
WORKLOADS = ("jobset", "lws", "ray")
CONTROLLERS = ("jobset", "lws", "kuberay")
CLIQUE_NODES = 8
FILLER_NAMESPACE = "wl-filler"
_JOBS = Resource("batch", "v1", "jobs", True, "Job")
_STATEFUL_SETS = Resource("apps", "v1", "statefulsets", True, "StatefulSet")


@dataclass(frozen=True, slots=True)
class Sizes:
    nodes: int
    leaves: int
    jobs: int
    groups: int
    workers: int

    @property
    def fabric(self) -> Fabric:
        return Fabric(nodes=self.nodes, leaves=self.leaves, clique_nodes=CLIQUE_NODES)

    def gangs(self, workload: str) -> dict[str, int]:
        """The gangs of ``workload`` (named as :func:`membership` names them) and their sizes."""
        if workload == "jobset":
            return {"jobset/train": self.jobs * JOB_PODS}
        if workload == "lws":
            return {f"lws/serve/{g}": LWS_SIZE for g in range(self.groups)}
        return {"ray/ray": 1 + self.workers}

    def pods(self, workload: str) -> int:
        return sum(self.gangs(workload).values())

    def demand(self) -> int:
        """Nodes the three workloads need together (the Ray head fits beside anything)."""
        return self.jobs * JOB_PODS + self.groups * LWS_SIZE + self.workers

    def what(self, workload: str) -> str:
        return {
            "jobset": f"JobSet of {self.jobs * JOB_PODS} × 8-GPU pods ({self.jobs} Jobs)",
            "lws": f"{self.groups} LWS groups of {LWS_SIZE} × 8-GPU pods",
            "ray": f"RayCluster of 1 + {self.workers} 8-GPU workers",
        }[workload]

    def slices(self, workload: str) -> str:
        return {
            "jobset": "Jobs inside one leaf",
            "lws": "groups inside one NVLink domain",
            "ray": "cluster inside one leaf",
        }[workload]


FULL = Sizes(nodes=1000, leaves=16, jobs=8, groups=32, workers=32)
QUICK = Sizes(nodes=128, leaves=4, jobs=2, groups=8, workers=8)


def make_object(workload: str, scheduler: str, sizes: Sizes) -> tuple[Resource, dict[str, Any]]:
    if workload == "jobset":
        return JOBSETS, jobset("train", scheduler, sizes.jobs)
    if workload == "lws":
        return LEADER_WORKER_SETS, leader_worker_set("serve", scheduler, sizes.groups)
    return RAY_CLUSTERS, ray_cluster("ray", scheduler, sizes.workers)


@dataclass(slots=True)
class Seen:
    member: Membership
    gpus: int
    created_at: float
    node: str = ""
    bound_at: float = 0.0


@dataclass(slots=True)
class Tracker:
    """The controllers' pods in one namespace, as a watch sees them."""

    pods: dict[str, Seen] = field(default_factory=dict)
    last_change: float = field(default_factory=time.perf_counter)

    def see(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        member = membership(meta.get("labels") or {})
        if member is None:
            return
        name = meta["name"]
        seen = self.pods.get(name)
        if seen is None:
            limits = (obj["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
            now = time.perf_counter()
            seen = self.pods[name] = Seen(member, int(limits.get(GPU_RESOURCE, 0)), now)
            self.last_change = now
        node = obj["spec"].get("nodeName") or ""
        if node and not seen.node:
            seen.node, seen.bound_at = node, time.perf_counter()
            self.last_change = seen.bound_at

    def bound(self, workload: str | None = None) -> list[Seen]:
        return [s for s in self.pods.values() if s.node and workload in (None, s.member.workload)]


async def track(kube: KubeClient, namespace: str, tracker: Tracker) -> None:
    """Keep ``tracker`` up to date (resumes a broken watch) until cancelled."""
    listed = await kube.list(PODS, namespace=namespace)
    for obj in listed["items"]:
        tracker.see(obj)
    rv = listed["resourceVersion"]
    while True:
        try:
            async for kind, obj in kube.watch(
                PODS, namespace=namespace, resource_version=rv, timeout_seconds=900
            ):
                rv = obj["metadata"].get("resourceVersion") or rv
                if kind in ("ADDED", "MODIFIED"):
                    tracker.see(obj)
        except KubeError as exc:
            print(f"watch of {namespace} broke ({exc}); resuming", file=sys.stderr)


@dataclass(slots=True)
class Alone:
    scheduler: str
    workload: str
    pods: int
    all_bound_s: float = float("nan")
    after_created_s: float = float("nan")
    bound: int = 0
    slices: int = 0
    in_leaf: int = 0
    in_clique: int = 0

    def summary(self) -> str:
        return (
            f"{self.scheduler:14s} {self.workload:6s} apply → all bound {self.all_bound_s:6.2f} s "
            f"(last pod created → all bound {self.after_created_s:.2f} s; {self.bound}/"
            f"{self.pods} bound); slices in one leaf {self.in_leaf}/{self.slices}, "
            f"in one NVLink domain {self.in_clique}/{self.slices}"
        )


@dataclass(slots=True)
class Contended:
    scheduler: str
    gangs: int
    pods: int
    whole: int = 0
    partial: int = 0
    partial_gpus: int = 0
    bound: int = 0
    settled_s: float = 0.0
    partial_names: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.scheduler:14s} contention: {self.bound}/{self.pods} pods bound, gangs whole "
            f"{self.whole}/{self.gangs}, partly bound {self.partial} (holding "
            f"{self.partial_gpus} GPUs), binding stopped after {self.settled_s:.1f} s"
            + (f"; partial: {', '.join(self.partial_names)}" if self.partial_names else "")
        )


def place_of(fabric: Fabric) -> tuple[dict[str, str], dict[str, str]]:
    """Node name → leaf, node name → NVLink domain."""
    leaves = {node_name(i): f"leaf-{fabric.leaf(i)}" for i in range(fabric.nodes)}
    cliques = {node_name(i): fabric.clique(i) for i in range(fabric.nodes)}
    return leaves, cliques


def count_slices(
    bound: Sequence[Seen], leaves: dict[str, str], cliques: dict[str, str]
) -> tuple[int, int, int]:
    """Slices, those inside one leaf, those inside one NVLink domain."""
    nodes: dict[str, list[str]] = {}
    for seen in bound:
        nodes.setdefault(seen.member.slice, []).append(seen.node)
    in_leaf = sum(len({leaves[n] for n in ns}) == 1 for ns in nodes.values())
    in_clique = sum(len({cliques[n] for n in ns}) == 1 for ns in nodes.values())
    return len(nodes), in_leaf, in_clique


async def new_namespace(kube: KubeClient, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.create(NAMESPACES, body)


async def warm_up(kube: KubeClient, namespace: str, scheduler: Process, name: str) -> None:
    """One pod (no GPU) bound by the scheduler just started, then deleted: it has synced."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "warmup"},
        "spec": {
            "schedulerName": SCHEDULERS[name],
            "containers": [{"name": "main", "image": "registry.example/pause:1"}],
        },
    }
    await kube.create(PODS, body, namespace=namespace)
    deadline = time.perf_counter() + 120
    while not (await kube.get(PODS, "warmup", namespace=namespace))["spec"].get("nodeName"):
        scheduler.check()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{name} did not bind the warm-up pod in 120 s")
        await asyncio.sleep(0.2)
    await kube.delete(PODS, "warmup", namespace=namespace, grace_period_seconds=0)


async def remove(kube: KubeClient, namespace: str, timeout_s: float = 120.0) -> None:
    """Delete the workload objects in ``namespace`` and wait until their Jobs, StatefulSets and
    pods are gone (the garbage collector deletes the children; pods are deleted at once)."""
    for resource in (JOBSETS, LEADER_WORKER_SETS, RAY_CLUSTERS):
        for item in (await kube.list(resource, namespace=namespace))["items"]:
            with contextlib.suppress(NotFound):
                await kube.delete(
                    resource,
                    item["metadata"]["name"],
                    namespace=namespace,
                    propagation_policy="Background",
                )
    deadline = time.perf_counter() + timeout_s
    while True:
        await kube.delete_collection(PODS, namespace=namespace, grace_period_seconds=0)
        left = [
            len((await kube.list(resource, namespace=namespace, limit=1))["items"])
            for resource in (PODS, _JOBS, _STATEFUL_SETS)
        ]
        if not any(left):
            return
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{namespace}: pods/Jobs/StatefulSets left after {timeout_s}s")
        await asyncio.sleep(0.5)


async def run_alone(
    kube: KubeClient,
    name: str,
    workload: str,
    sizes: Sizes,
    *,
    scheduler: Process,
    timeout_s: float,
) -> Alone:
    namespace = f"wl-{name}-{workload}"
    await new_namespace(kube, namespace)
    result = Alone(name, workload, sizes.pods(workload))
    tracker = Tracker()
    watcher = asyncio.create_task(track(kube, namespace, tracker))
    resource, body = make_object(workload, SCHEDULERS[name], sizes)
    t0 = time.perf_counter()
    await kube.create(resource, body, namespace=namespace)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            while len(tracker.bound(workload)) < result.pods:
                scheduler.check()
                await asyncio.sleep(0.05)
    bound = tracker.bound(workload)
    result.bound = len(bound)
    if result.bound >= result.pods:
        last = max(s.bound_at for s in bound)
        result.all_bound_s = last - t0
        result.after_created_s = last - max(s.created_at for s in bound)
    leaves, cliques = place_of(sizes.fabric)
    result.slices, result.in_leaf, result.in_clique = count_slices(bound, leaves, cliques)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    await remove(kube, namespace)
    return result


def free_nodes(sizes: Sizes, free: int) -> set[int]:
    """``free`` Nodes (rounded up to whole NVLink domains) spread over the leaves: the k-th
    domain taken is the (k // leaves)-th of leaf k % leaves."""
    fabric = sizes.fabric
    cliques = -(-free // CLIQUE_NODES)
    out: set[int] = set()
    for k in range(cliques):
        leaf, nth = k % sizes.leaves, k // sizes.leaves
        start = fabric.leaf_start(leaf) + nth * CLIQUE_NODES
        out.update(i for i in range(start, start + CLIQUE_NODES) if fabric.leaf(i) == leaf)
    return out


async def fill(kube: KubeClient, sizes: Sizes, keep_free: set[int]) -> int:
    """An 8-GPU pod, bound at its creation, on every Node not in ``keep_free``; waits until
    KWOK has them Running."""
    await new_namespace(kube, FILLER_NAMESPACE)
    sem = asyncio.Semaphore(32)
    taken = [i for i in range(sizes.nodes) if i not in keep_free]

    async def one(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"fill-{i:05d}", "labels": {"app": "wl-filler"}},
            "spec": {
                "nodeName": node_name(i),
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/train:1",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "4Gi"},
                            "limits": {GPU_RESOURCE: "8"},
                        },
                    }
                ],
            },
        }
        async with sem:
            await kube.create(PODS, body, namespace=FILLER_NAMESPACE)

    await asyncio.gather(*(one(i) for i in taken))
    deadline = time.perf_counter() + 300
    while True:
        listed = await kube.list(PODS, namespace=FILLER_NAMESPACE, resource_version="0")
        running = sum(1 for p in listed["items"] if p.get("status", {}).get("phase") == "Running")
        if running >= len(taken):
            return len(taken)
        if time.perf_counter() > deadline:
            raise RuntimeError(f"fillers: only {running}/{len(taken)} Running")
        await asyncio.sleep(1.0)


async def run_contended(
    kube: KubeClient,
    name: str,
    sizes: Sizes,
    *,
    scheduler: Process,
    quiet_s: float,
    timeout_s: float,
) -> Contended:
    namespace = f"wl-{name}-contention"
    await new_namespace(kube, namespace)
    gangs = {g: n for w in WORKLOADS for g, n in sizes.gangs(w).items()}
    result = Contended(name, len(gangs), sum(gangs.values()))
    tracker = Tracker()
    watcher = asyncio.create_task(track(kube, namespace, tracker))
    t0 = time.perf_counter()
    await asyncio.gather(
        *(
            kube.create(resource, body, namespace=namespace)
            for resource, body in (make_object(w, SCHEDULERS[name], sizes) for w in WORKLOADS)
        )
    )
    tracker.last_change = time.perf_counter()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            while len(tracker.bound()) < result.pods:
                scheduler.check()
                if time.perf_counter() - tracker.last_change > quiet_s:
                    break
                await asyncio.sleep(0.1)
    result.settled_s = tracker.last_change - t0
    bound: dict[str, list[Seen]] = {}
    for seen in tracker.bound():
        bound.setdefault(seen.member.gang, []).append(seen)
    result.bound = sum(len(b) for b in bound.values())
    for gang, size in gangs.items():
        members = bound.get(gang, [])
        if len(members) >= size:
            result.whole += 1
        elif members:
            result.partial += 1
            result.partial_gpus += sum(s.gpus for s in members)
            result.partial_names.append(f"{gang} {len(members)}/{size}")
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    await remove(kube, namespace)
    return result
