"""AI workloads made by their own controllers on KWOK nodes: Topos vs the real kube-scheduler of the
same Kubernetes version, same objects, same API server, one run.

One etcd + kube-apiserver + kube-controller-manager (Jobs, StatefulSets, garbage collection), the
real workload controllers built from their Go modules (JobSet v0.10.1, LeaderWorkerSet v0.7.0,
KubeRay v1.5.0: ``devcluster.workloads``, with their CRDs and webhooks), and KWOK managing
``--nodes`` fake DGX H100 Nodes (8 ``nvidia.com/gpu`` each) in ``--leaves`` leaves (8 leaves a
spine) with NVLink domains (``nvidia.com/gpu.clique``) of 8 Nodes inside each leaf
(``benchmarks/kwok_cluster.py``). The workloads (``benchmarks/kwok_workload_objects.py``), with
Topos' slice keys on their pod templates:

- (a) a JobSet of ``--jobs`` Jobs × 8 pods × 8 GPUs (64 pods), each Job a slice inside one leaf;
- (b) a LeaderWorkerSet of ``--groups`` groups of 4 pods × 8 GPUs, each group inside one NVLink
  domain;
- (c) a RayCluster of a head and ``--workers`` 8-GPU workers, all inside one leaf.

**Alone.** Each scheduler in turn (started as its own process, client QPS/burst ``--limit``,
warmed up with one pod; the other not running) gets each workload alone on the empty cluster:
the object is created (its pod templates name the scheduler) and the benchmark's watch records
when each pod is seen bound. Figures: apply → all bound (the create of the object sent → the last
pod's bind seen), and the share of slices whose pods' nodes all lie in one leaf, and in one NVLink
domain. Between runs the object is deleted and its pods removed, so every run starts on the same
empty nodes.

**Contention.** Pods created by the benchmark (bound by it, 8 GPUs each) fill every Node but a
few whole NVLink domains (``--free`` Nodes, fewer than the three workloads need together: about
70 % of them by default, spread over the leaves), then each scheduler in turn gets the three
objects at once. Once binding has stopped (every pod bound, or no pod created or bound for
``--quiet`` seconds) the gangs are counted: whole, partly bound (some but not all of a gang's
pods bound: GPUs held by a gang that cannot run), or not started. A gang is the JobSet, each LWS
group, the RayCluster (head and workers), as docs/gangs.md "Gangs from workload controllers" says;
kube-scheduler has no notion of them and places pod by pod.

    .venv/bin/python -m benchmarks.kwok_workloads [--quick] [--nodes 1000] [--leaves 16]
        [--jobs 8] [--groups 32] [--workers 32] [--free N] [--limit 50/100] [--quiet 10]
        [--timeout 180] [--keep] [--json]

``--quick``: 128 Nodes in 4 leaves, a JobSet of 2 Jobs, 8 LWS groups, 8 Ray workers (what
``benchmarks/tests/test_kwok_workloads.py`` runs). Needs ``python -m devcluster.binaries ensure
--all`` (kube-scheduler, kwok) and ``python -m devcluster.workloads ensure jobset lws kuberay``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.kwok_cluster import (
    APISERVER_ARGS,
    Fabric,
    Limit,
    Process,
    compile_topos,
    create_nodes,
    node_name,
    parse_limits,
    start_kube_scheduler,
    start_kwok,
    start_topos,
    wait_ready,
)
from benchmarks.kwok_settle import settle
from benchmarks.kwok_settle import warm_up as warm_up_cluster
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
from benchmarks.run_all import machine
from common.kube import NAMESPACES, PODS, KubeClient, KubeError, NotFound, Resource
from common.podkeys import GPU_RESOURCE
from devcluster import controllers
from devcluster.binaries import KUBERNETES_VERSION, Binaries, ensure
from devcluster.controlplane import ControlPlane, ControlPlaneSettings
from devcluster.workloads import launch

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


def launcher(
    binaries: Binaries, plane: ControlPlane, work: Path, limit: Limit
) -> Callable[[str, str], Process]:
    def launch_one(name: str, tag: str) -> Process:
        if name == "kube-scheduler":
            return start_kube_scheduler(binaries, plane, work, limit, tag)
        return start_topos(plane, work, limit, tag, binds=64)

    return launch_one


async def bench(
    args: argparse.Namespace,
    sizes: Sizes,
    plane: ControlPlane,
    start: Callable[[str, str], Process],
) -> tuple[list[Alone], list[Contended], str]:
    alone: list[Alone] = []
    contended: list[Contended] = []
    order = [s.strip() for s in args.order.split(",") if s.strip()]
    async with await KubeClient.connect(plane.kubeconfig) as kube:
        t0 = time.perf_counter()
        await create_nodes(kube, sizes.nodes, sizes.fabric)
        created = time.perf_counter() - t0
        ready = await wait_ready(kube, sizes.nodes)
        quiet = await settle(plane)
        say(
            args,
            f"{sizes.nodes} Nodes in {sizes.leaves} leaves created in {created:.1f}s, all Ready "
            f"(KWOK) {ready:.1f}s later, API server quiet {quiet:.1f}s after that",
        )
        if args.warm_up:
            say(args, (await warm_up_cluster(plane, kube, sizes.nodes, sizes.nodes)).summary())
        for name in order:
            scheduler = start(name, f"alone-{name}")
            try:
                await new_namespace(kube, f"wl-{name}-warm")
                await warm_up(kube, f"wl-{name}-warm", scheduler, name)
                for workload in WORKLOADS:
                    run = await run_alone(
                        kube, name, workload, sizes, scheduler=scheduler, timeout_s=args.timeout
                    )
                    alone.append(run)
                    say(args, run.summary())
            finally:
                scheduler.stop()
        keep_free = free_nodes(sizes, args.free or int(0.7 * sizes.demand()))
        filled = await fill(kube, sizes, keep_free)
        setting = (
            f"{filled:,} Nodes filled by 8-GPU pods, {len(keep_free)} free for "
            f"{sizes.demand()} Nodes' worth of pods"
        )
        say(args, setting)
        for name in order:
            scheduler = start(name, f"contention-{name}")
            try:
                await warm_up(kube, f"wl-{name}-warm", scheduler, name)
                run_c = await run_contended(
                    kube,
                    name,
                    sizes,
                    scheduler=scheduler,
                    quiet_s=args.quiet,
                    timeout_s=args.timeout,
                )
                contended.append(run_c)
                say(args, run_c.summary())
            finally:
                scheduler.stop()
    return alone, contended, setting


def rows(
    alone: Sequence[Alone], contended: Sequence[Contended], sizes: Sizes, setting: str
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    base = f"kube-scheduler v{KUBERNETES_VERSION}"
    where = f"{sizes.nodes:,} KWOK nodes, {sizes.leaves} leaves"
    for workload in WORKLOADS:
        pair = {r.scheduler: r for r in alone if r.workload == workload}
        topos, kube = pair.get("topos"), pair.get("kube-scheduler")
        if topos is None or kube is None:
            continue
        case = f"{where}, {sizes.what(workload)}, alone"

        def done(r: Alone) -> str:
            if r.bound < r.pods:
                return f"{r.bound}/{r.pods} bound after the timeout"
            return f"{r.all_bound_s:.2f} s ({r.after_created_s:.2f} s)"

        out.append(
            {
                "case": case,
                "figure": "apply → all bound (last pod created → all bound)",
                "topos": done(topos),
                "baseline": f"{done(kube)} ({base})",
                "goal": "",
            }
        )
        out.append(
            {
                "case": case,
                "figure": f"{sizes.slices(workload)} (asked); in one leaf / one NVLink domain",
                "topos": f"{topos.in_leaf}/{topos.slices} / {topos.in_clique}/{topos.slices}",
                "baseline": f"{kube.in_leaf}/{kube.slices} / {kube.in_clique}/{kube.slices}",
                "goal": "every slice as asked",
            }
        )
    pair_c = {r.scheduler: r for r in contended}
    topos_c, kube_c = pair_c.get("topos"), pair_c.get("kube-scheduler")
    if topos_c is not None and kube_c is not None:
        case = f"{where}, the three at once, {setting}"

        def gangs(r: Contended) -> str:
            return f"{r.partial} ({r.partial_gpus} GPUs held); {r.whole} whole; {r.bound} pods"

        out.append(
            {
                "case": case,
                "figure": f"of {topos_c.gangs} gangs once binding stopped: partly bound (GPUs "
                "they hold); whole; pods bound",
                "topos": gangs(topos_c),
                "baseline": f"{gangs(kube_c)} ({base})",
                "goal": "0 partly bound",
            }
        )
    return out


def say(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the small size (defaults below)")
    ap.add_argument("--nodes", type=int, help=f"KWOK Nodes (default {FULL.nodes})")
    ap.add_argument("--leaves", type=int, help=f"leaves (default {FULL.leaves})")
    ap.add_argument("--jobs", type=int, help=f"JobSet Jobs of 8 pods (default {FULL.jobs})")
    ap.add_argument("--groups", type=int, help=f"LWS groups of 4 (default {FULL.groups})")
    ap.add_argument("--workers", type=int, help=f"Ray workers (default {FULL.workers})")
    ap.add_argument(
        "--free",
        type=int,
        default=0,
        help="contention: Nodes left free (rounded up to whole NVLink domains; default 70 %% of "
        "what the three workloads need)",
    )
    ap.add_argument("--limit", default="50/100", help="both schedulers' client QPS/burst")
    ap.add_argument("--order", default="kube-scheduler,topos", help="which scheduler runs first")
    ap.add_argument("--quiet", type=float, default=10.0, help="contention: binding has stopped")
    ap.add_argument("--timeout", type=float, default=180.0, help="per run")
    ap.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="before the first run, a pod on every Node (created and bound by the benchmark) "
        "until Running, then deleted (benchmarks/kwok_settle.py): what a fresh cluster does "
        "once falls on no scheduler's run",
    )
    ap.add_argument("--keep", action="store_true", help="keep the logs and configs")
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    default = QUICK if args.quick else FULL
    sizes = Sizes(
        nodes=args.nodes or default.nodes,
        leaves=args.leaves or default.leaves,
        jobs=args.jobs or default.jobs,
        groups=args.groups or default.groups,
        workers=args.workers or default.workers,
    )
    if sizes.demand() > sizes.nodes:
        ap.error(f"the workloads need {sizes.demand()} Nodes, more than --nodes {sizes.nodes}")
    if sorted(SCHEDULERS) != sorted(args.order.split(",")):
        ap.error(f"--order must name {' and '.join(SCHEDULERS)}, got {args.order!r}")
    (limit,) = parse_limits(args.limit)
    info = machine()
    say(args, f"machine: {info['CPU']}, {info['cores']}, {info['memory']}, {info['Python']}")
    started = time.perf_counter()
    binaries = ensure(extra=True, log=False)
    work = Path(tempfile.mkdtemp(prefix="topos-kwok-workloads-"))
    plane = ControlPlane.start(
        binaries=binaries,
        settings=ControlPlaneSettings(
            controllers=controllers.PLAYGROUND, extra_apiserver_args=APISERVER_ARGS
        ),
    )
    kwok: Process | None = None
    running: launch.WorkloadControllers | None = None
    try:
        kwok = start_kwok(binaries, plane, work)
        running = launch.start(plane, list(CONTROLLERS), directory=work / "workloads", log=False)
        versions = ", ".join(f"{p.name} {p.version}" for p in running.processes)
        say(
            args,
            f"Kubernetes v{KUBERNETES_VERSION} (kube-apiserver, kube-scheduler), KWOK, "
            f"{versions} (built from their modules)",
        )
        compile_topos()
        load0 = os.getloadavg()[0]
        alone, contended, setting = asyncio.run(
            bench(args, sizes, plane, launcher(binaries, plane, work, limit))
        )
    finally:
        if running is not None:
            running.stop()
        if kwok is not None:
            kwok.stop()
        plane.stop()
        if args.keep:
            print(f"logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    table = rows(alone, contended, sizes, setting)
    notes = [
        f"machine: {info['CPU']}, {info['cores']}; load average {load0:.1f} before the runs, "
        f"{os.getloadavg()[0]:.1f} after",
        f"one scheduler process at a time (QPS/burst {limit.label}) on the same API server, "
        "nodes and objects; the real JobSet, LWS and KubeRay controllers make the pods",
        *(r.summary() for r in alone),
        *(r.summary() for r in contended),
        f"whole benchmark {time.perf_counter() - started:.0f} s",
    ]
    if args.json:
        print(json.dumps({"rows": table, "notes": notes}))
    else:
        for r in table:
            print(f"{r['case']}: {r['figure']}: Topos {r['topos']}, {r['baseline']} {r['goal']}")
        for line in notes:
            print(line)
    complete = all(r.bound >= r.pods for r in alone)
    return 0 if complete and len(contended) == len(SCHEDULERS) else 1


if __name__ == "__main__":
    sys.exit(main())
