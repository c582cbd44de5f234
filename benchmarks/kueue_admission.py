"""Kueue in front, Topos behind: the same seeded stream of Jobs and JobSets admitted three ways, on
one playground, one run.

The playground is ``topos devcluster up --nodes dgx-h100:<N> --coordinator --kueue`` (the real
Kueue v0.17.0 with JobSet, a Topos coordinator, KWOK running the pods on simulated 8-GPU nodes, 4
nodes a leaf, 4 leaves a spine), started by the benchmark unless ``--kubeconfig`` names one that
runs. Each arm gets its own namespace and Kueue objects — a ResourceFlavor, two ClusterQueues
``team-a`` and ``team-b`` in one cohort (``--quota`` GPUs nominal each, borrowing from each other,
CPU and memory not limiting), a LocalQueue each — and the same stream:

- **quota**: Kueue's quota alone; every admitted pod is placed by Topos;
- **tas**: the flavor names a Kueue ``Topology`` (spine, leaf, host): Kueue's Topology-Aware
  Scheduling picks the nodes (``podset-preferred-topology: topos.io/leaf``; ``required`` for
  NVLink-asking workloads of at most a leaf) and Topos places inside them;
- **check**: both ClusterQueues ask Topos's placement admission check (``topos.io/placement``):
  Kueue admits a workload only once Topos says all its pods fit now.

Before the arms, ``--filler`` nodes (every other one by default) get a 2-GPU pod Kueue does not
manage (another tenant's, bound by Topos, running until the end): the cluster has fewer GPUs free
than the ClusterQueues' quota, and fewer whole nodes than GPUs. The same pods stand in every arm.

The stream (``--seed``): ``--workloads`` Jobs and JobSets submitted over ``--window`` seconds,
each a gang of 2–16 pods × 1, 2, 4 or 8 GPUs (at most 64 GPUs a workload), some asking
``topos.io/gpu-locality: nvlink`` or ``topos.io/numa-policy: single-numa``, each pod running
15–35 s once started (``topos.io/sim-duration``). No DRA claims: the playground's ``--dra`` turns
every GPU into a DRA device, and Kueue's TAS does not support DRA (kubernetes-sigs/kueue#10548).

Watched (Workloads and pods, sampled every 0.5 s), per arm:

- admitted but not fully bound 60 s after admission (and never fully bound in the arm);
- GPU-seconds of quota held by admitted workloads not all of whose pods are bound (and, apart,
  by workloads that reserved quota but are not admitted: the check's Pending, TAS's wait);
- submit → all pods Running, p50 / p95 (and how many never got there in the arm);
- GPU-seconds idle while some submitted workload is not yet all Running.

An arm ends once every workload has been all Running, or ``--drain`` seconds after the last
submission; then its namespace and queues are deleted and the next arm starts on an empty cluster.

    .venv/bin/python -m benchmarks.kueue_admission [--nodes 32] [--filler 16] [--workloads 24]
        [--window 30] [--drain 120] [--quota 128] [--seed 7] [--arms quota,tas,check]
        [--kubeconfig PATH] [--json]

Needs KWOK (``python -m devcluster.binaries ensure --all``) and Kueue, JobSet and LWS built
(``make controllers``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from common.kube import NAMESPACES, NODES, PODS, KubeClient, KubeError, NotFound, Resource
from common.kube.errors import Gone, Unreachable
from devcluster.subprocess_env import subprocess_env

ROOT: Final = Path(__file__).resolve().parent.parent
KUEUE: Final = "kueue.x-k8s.io"
V: Final = "v1beta2"
FLAVORS: Final = Resource(KUEUE, V, "resourceflavors", False, "ResourceFlavor")
CLUSTER_QUEUES: Final = Resource(KUEUE, V, "clusterqueues", False, "ClusterQueue")
LOCAL_QUEUES: Final = Resource(KUEUE, V, "localqueues", True, "LocalQueue")
WORKLOADS: Final = Resource(KUEUE, V, "workloads", True, "Workload")
CHECKS: Final = Resource(KUEUE, V, "admissionchecks", False, "AdmissionCheck")
TOPOLOGIES: Final = Resource(KUEUE, V, "topologies", False, "Topology")
JOBS: Final = Resource("batch", "v1", "jobs", True, "Job")
JOBSETS: Final = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", True, "JobSet")
ARMS: Final = ("quota", "tas", "check")
TEAMS: Final = ("team-a", "team-b")
WHO: Final = "bench.topos.io/workload"  # on every pod: which workload of the stream it is
GPU: Final = "nvidia.com/gpu"
GPUS_PER_NODE: Final = 8
LEAF_GPUS: Final = 4 * GPUS_PER_NODE  # the playground puts 4 nodes in a leaf
MAX_GPUS: Final = 64
STUCK_S: Final = 60.0
SAMPLE_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class Spec:
    """One workload of the stream."""

    name: str
    kind: str  # job | jobset
    team: str
    replicas: int  # a JobSet's Jobs (1 for a Job)
    parallelism: int  # pods a Job
    gpus: int  # a pod
    nvlink: bool
    numa: bool
    at: float  # seconds after the arm starts
    duration_s: int

    @property
    def pods(self) -> int:
        return self.replicas * self.parallelism

    @property
    def total_gpus(self) -> int:
        return self.pods * self.gpus


def stream(seed: int, count: int, window_s: float) -> list[Spec]:
    """The seeded stream: gangs of 2–16 pods × 1/2/4/8 GPUs (≤ 64 GPUs), a third JobSets."""
    rng = random.Random(seed)
    times = sorted(rng.uniform(0.0, window_s) for _ in range(count))
    out: list[Spec] = []
    for i, at in enumerate(times):
        gpus = rng.choices((1, 2, 4, 8), weights=(3, 3, 3, 4))[0]
        most = min(16, MAX_GPUS // gpus)
        kind = "jobset" if rng.random() < 0.35 else "job"
        replicas = 2 if kind == "jobset" and most >= 4 and rng.random() < 0.5 else 1
        parallelism = rng.randint(max(1, 2 // replicas), most // replicas)
        out.append(
            Spec(
                name=f"w{i:02d}-{kind}",
                kind=kind,
                team=TEAMS[rng.randrange(2)],
                replicas=replicas,
                parallelism=parallelism,
                gpus=gpus,
                nvlink=gpus >= 2 and rng.random() < 0.4,
                numa=gpus <= 4 and rng.random() < 0.3,
                at=round(at, 2),
                duration_s=rng.randint(15, 35),
            )
        )
    return out


def pod_template(spec: Spec, arm: str) -> dict[str, Any]:
    labels = {WHO: spec.name}
    if spec.kind == "job":  # a JobSet's pods are a Topos gang of their own (docs/gangs.md)
        labels.update({"topos.io/gang": spec.name, "topos.io/gang-min": str(spec.pods)})
    annotations = {"topos.io/sim-duration": f"{spec.duration_s}s"}
    if spec.nvlink:
        annotations["topos.io/gpu-locality"] = "nvlink"
    if spec.numa:
        annotations["topos.io/numa-policy"] = "single-numa"
    if arm == "tas":
        if spec.nvlink and spec.total_gpus <= LEAF_GPUS:
            annotations["kueue.x-k8s.io/podset-required-topology"] = "topos.io/leaf"
        else:
            annotations["kueue.x-k8s.io/podset-preferred-topology"] = "topos.io/leaf"
    return {
        "metadata": {"labels": labels, "annotations": annotations},
        "spec": {
            "schedulerName": "topos",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "train",
                    "image": "trainer",
                    "resources": {
                        "requests": {
                            "cpu": str(8 * spec.gpus),
                            "memory": f"{64 * spec.gpus}Gi",
                            GPU: str(spec.gpus),
                        },
                        "limits": {GPU: str(spec.gpus)},
                    },
                }
            ],
        },
    }


def workload_object(spec: Spec, arm: str) -> tuple[Resource, dict[str, Any]]:
    meta = {"name": spec.name, "labels": {f"{KUEUE}/queue-name": spec.team}}
    job_spec = {
        "parallelism": spec.parallelism,
        "completions": spec.parallelism,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": pod_template(spec, arm),
    }
    if spec.kind == "job":
        return JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}
    return JOBSETS, {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": spec.replicas, "template": {"spec": job_spec}}
            ]
        },
    }


def queue_objects(arm: str, prefix: str, quota: int) -> list[tuple[Resource, dict[str, Any]]]:
    """The arm's Kueue objects, in creation order (named ``prefix``…; the LocalQueues in the
    namespace ``prefix``)."""
    name = namespace = prefix
    out: list[tuple[Resource, dict[str, Any]]] = []

    def kueue(kind: str, meta: dict[str, Any], **body: Any) -> dict[str, Any]:
        return {"apiVersion": f"{KUEUE}/{V}", "kind": kind, "metadata": meta, **body}

    flavor: dict[str, Any] = {"nodeLabels": {"topos.io/simulated": "true"}}
    if arm == "tas":
        levels = ["topos.io/spine", "topos.io/leaf", "kubernetes.io/hostname"]
        out.append(
            (
                TOPOLOGIES,
                kueue(
                    "Topology",
                    {"name": name},
                    spec={"levels": [{"nodeLabel": x} for x in levels]},
                ),
            )
        )
        flavor["topologyName"] = name
    out.append((FLAVORS, kueue("ResourceFlavor", {"name": name}, spec=flavor)))
    if arm == "check":
        out.append(
            (
                CHECKS,
                kueue(
                    "AdmissionCheck", {"name": name}, spec={"controllerName": "topos.io/placement"}
                ),
            )
        )
    for team in TEAMS:
        spec: dict[str, Any] = {
            "cohortName": name,
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [
                        {
                            "name": name,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "100000"},
                                {"name": "memory", "nominalQuota": "1000Ti"},
                                {"name": GPU, "nominalQuota": str(quota)},
                            ],
                        }
                    ],
                }
            ],
        }
        if arm == "check":
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name}]}
        out.append((CLUSTER_QUEUES, kueue("ClusterQueue", {"name": f"{name}-{team}"}, spec=spec)))
        out.append(
            (
                LOCAL_QUEUES,
                kueue(
                    "LocalQueue",
                    {"name": team, "namespace": namespace},
                    spec={"clusterQueue": f"{name}-{team}"},
                ),
            )
        )
    return out


@dataclass
class Seen:
    """What the watches saw of one workload (times in seconds since the arm started)."""

    spec: Spec
    submitted: float | None = None
    reserved: bool = False
    admitted: bool = False
    admitted_at: float | None = None
    bound: set[str] = field(default_factory=set)  # pods bound now (live)
    bound_all_at: float | None = None
    running: set[str] = field(default_factory=set)  # pods ever seen Running
    running_all_at: float | None = None


@dataclass
class Figures:
    arm: str
    workloads: int
    admitted: int
    stuck_60s: int  # admitted, not all pods bound 60 s later (or by the end, if that came later)
    never_bound: int  # admitted, never all bound in the arm
    quota_gpu_s_admitted_unplaced: float
    quota_gpu_s_reserved_not_admitted: float
    all_running: int
    running_p50_s: float | None
    running_p95_s: float | None
    idle_gpu_s_while_waiting: float
    wall_s: float


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def _true(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


class Arm:
    """One arm: its queues, the stream submitted on time, the watches and the sampler."""

    def __init__(
        self, kube: KubeClient, arm: str, specs: Sequence[Spec], args: Any, run: str, held: int
    ) -> None:
        self.kube = kube
        self.arm = arm
        self.prefix = f"kb{run}-{arm}"  # namespace and cluster-scoped Kueue objects
        self.namespace = self.prefix
        self.args = args
        self.seen = {s.name: Seen(s) for s in specs}
        self.pod_gpus: dict[str, int] = {}  # live bound pods → GPUs
        self.start = time.monotonic()
        self.quota_unplaced = 0.0
        self.quota_waiting = 0.0
        self.idle = 0.0
        self.total_gpus = args.nodes * GPUS_PER_NODE - held  # the filler's GPUs are not idle
        self.done = asyncio.Event()  # every workload has been all Running

    def now(self) -> float:
        return time.monotonic() - self.start

    async def _watch(
        self, resource: Resource, handle: Callable[[str, dict[str, Any]], None]
    ) -> None:
        while True:
            try:
                listed = await self.kube.list(resource, namespace=self.namespace)
                for item in listed["items"]:
                    handle("ADDED", item)
                async for kind, obj in self.kube.watch(
                    resource,
                    namespace=self.namespace,
                    resource_version=listed["resourceVersion"],
                    timeout_seconds=60,
                ):
                    handle(kind, obj)
            except (Gone, Unreachable, KubeError):
                await asyncio.sleep(0.5)

    def _on_workload(self, kind: str, obj: dict[str, Any]) -> None:
        owners = obj["metadata"].get("ownerReferences") or []
        seen = self.seen.get(str(owners[0].get("name"))) if owners else None
        if seen is None:
            return
        if kind == "DELETED":
            seen.reserved = seen.admitted = False
            return
        seen.reserved = _true(obj, "QuotaReserved") and not _true(obj, "Finished")
        seen.admitted = _true(obj, "Admitted") and not _true(obj, "Finished")
        if seen.admitted and seen.admitted_at is None:
            seen.admitted_at = self.now()

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        seen = self.seen.get(str((meta.get("labels") or {}).get(WHO)))
        if seen is None:
            return
        name = str(meta["name"])
        phase = (obj.get("status") or {}).get("phase")
        live = kind != "DELETED" and phase not in ("Succeeded", "Failed")
        live = live and not meta.get("deletionTimestamp")
        node = (obj.get("spec") or {}).get("nodeName")
        if live and node:
            seen.bound.add(name)
            self.pod_gpus[f"{seen.spec.name}/{name}"] = seen.spec.gpus
        else:
            seen.bound.discard(name)
            self.pod_gpus.pop(f"{seen.spec.name}/{name}", None)
        if node and seen.bound_all_at is None and len(seen.bound) >= seen.spec.pods:
            seen.bound_all_at = self.now()
        if phase in ("Running", "Succeeded"):
            seen.running.add(name)
            if seen.running_all_at is None and len(seen.running) >= seen.spec.pods:
                seen.running_all_at = self.now()
                if all(s.running_all_at is not None for s in self.seen.values()):
                    self.done.set()

    async def _sample(self) -> None:
        last = self.now()
        while True:
            await asyncio.sleep(SAMPLE_S)
            now = self.now()
            dt, last = now - last, now
            waiting = False
            for s in self.seen.values():
                if s.admitted and len(s.bound) < s.spec.pods and s.bound_all_at is None:
                    self.quota_unplaced += s.spec.total_gpus * dt
                if s.reserved and not s.admitted:
                    self.quota_waiting += s.spec.total_gpus * dt
                if s.submitted is not None and s.running_all_at is None:
                    waiting = True
            if waiting:
                self.idle += max(0, self.total_gpus - sum(self.pod_gpus.values())) * dt

    async def _submit(self) -> None:
        for seen in sorted(self.seen.values(), key=lambda s: s.spec.at):
            await asyncio.sleep(max(0.0, seen.spec.at - self.now()))
            resource, body = workload_object(seen.spec, self.arm)
            seen.submitted = self.now()
            await self.kube.create(resource, body, namespace=self.namespace)

    async def run(self) -> Figures:
        made = await self._queues()
        tasks: list[asyncio.Task[None]] = []
        try:
            self.start = time.monotonic()
            tasks = [
                asyncio.create_task(self._watch(WORKLOADS, self._on_workload)),
                asyncio.create_task(self._watch(PODS, self._on_pod)),
                asyncio.create_task(self._sample()),
            ]
            await self._submit()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), self.args.drain)
            wall = self.now()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._clean(made)
        return self.figures(wall)

    def figures(self, wall: float) -> Figures:
        admitted = [s for s in self.seen.values() if s.admitted_at is not None]
        stuck = 0
        for s in admitted:
            assert s.admitted_at is not None
            if s.bound_all_at is None or s.bound_all_at - s.admitted_at > STUCK_S:
                stuck += 1
        took = [
            s.running_all_at - s.submitted
            for s in self.seen.values()
            if s.running_all_at is not None and s.submitted is not None
        ]
        return Figures(
            arm=self.arm,
            workloads=len(self.seen),
            admitted=len(admitted),
            stuck_60s=stuck,
            never_bound=sum(1 for s in admitted if s.bound_all_at is None),
            quota_gpu_s_admitted_unplaced=round(self.quota_unplaced),
            quota_gpu_s_reserved_not_admitted=round(self.quota_waiting),
            all_running=len(took),
            running_p50_s=_pct(took, 0.50),
            running_p95_s=_pct(took, 0.95),
            idle_gpu_s_while_waiting=round(self.idle),
            wall_s=round(wall, 1),
        )

    async def _queues(self) -> list[tuple[Resource, str]]:
        with contextlib.suppress(KubeError):
            await self.kube.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
            )
        made: list[tuple[Resource, str]] = []
        for resource, body in queue_objects(self.arm, self.prefix, self.args.quota):
            ns = self.namespace if resource.namespaced else None
            await self.kube.create(resource, body, namespace=ns)
            if not resource.namespaced:
                made.append((resource, body["metadata"]["name"]))
        for resource, name in made:
            if resource is CLUSTER_QUEUES:

                async def active(name: str = name) -> bool:
                    return _true(await self.kube.get(CLUSTER_QUEUES, name), "Active")

                await _until(active, 60, f"ClusterQueue {name} Active")
        return made

    async def _clean(self, made: Sequence[tuple[Resource, str]]) -> None:
        """The arm's JobSets, Jobs, pods and Workloads gone (the namespace stays: the playground
        runs no namespace controller), then its queues."""
        ns = self.namespace
        for resource in (JOBSETS, JOBS, PODS, WORKLOADS):
            with contextlib.suppress(NotFound):
                await self.kube.delete_collection(resource, namespace=ns, grace_period_seconds=0)

        async def gone() -> bool:
            for resource in (PODS, WORKLOADS):
                if (await self.kube.list(resource, namespace=ns, limit=1))["items"]:
                    with contextlib.suppress(NotFound):
                        await self.kube.delete_collection(
                            resource, namespace=ns, grace_period_seconds=0
                        )
                    return False
            return True

        await _until(gone, 180, f"the pods and Workloads of {ns} gone")
        for resource, name in reversed(made):
            with contextlib.suppress(NotFound):
                await self.kube.delete(resource, name)


FILLER_GPUS: Final = 2


async def fill(kube: KubeClient, namespace: str, count: int) -> int:
    """A 2-GPU pod Kueue does not manage on every other node (``count`` of them), bound by
    Topos; the GPUs they hold."""
    with contextlib.suppress(KubeError):
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    nodes = sorted(
        (n["metadata"]["name"] for n in (await kube.list(NODES))["items"]),
        key=lambda name: (len(name), name),
    )
    chosen = nodes[::2][:count]
    for i, node in enumerate(chosen):
        await kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"tenant-{i}", "labels": {"app": "tenant"}},
                "spec": {
                    "schedulerName": "topos",
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "serve",
                            "image": "server",
                            "resources": {
                                "requests": {"cpu": "8", "memory": "64Gi", GPU: "2"},
                                "limits": {GPU: "2"},
                            },
                        }
                    ],
                },
            },
            namespace=namespace,
        )

    async def bound() -> bool:
        pods = (await kube.list(PODS, namespace=namespace))["items"]
        return sum(1 for p in pods if (p.get("spec") or {}).get("nodeName")) >= len(chosen)

    await _until(bound, 120, f"the {len(chosen)} tenant pods bound")
    return len(chosen) * FILLER_GPUS


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(1.0)


def _topos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=subprocess_env(),
    )


@contextlib.contextmanager
def playground(nodes: int, kubeconfig: str | None) -> Any:
    """A running playground's kubeconfig: ``kubeconfig`` as given, else one started here."""
    if kubeconfig:
        yield kubeconfig
        return
    with tempfile.TemporaryDirectory(prefix="kueue-bench-") as tmp:
        directory = Path(tmp) / "dc"
        up = _topos(
            "devcluster", "up", "--nodes", f"dgx-h100:{nodes}", "--coordinator",
            "--job-duration", "0", "--kueue", "--dir", str(directory),
        )  # fmt: skip
        try:
            if up.returncode != 0:
                raise RuntimeError(f"devcluster up failed:\n{up.stderr[-3000:]}")
            yield up.stdout.splitlines()[0].removeprefix("export KUBECONFIG=")
        finally:
            _topos("devcluster", "down", "--dir", str(directory))


def table(rows: Sequence[Figures]) -> str:
    head = (
        "| arm | admitted | not all bound 60 s after admission (never) | quota GPU·s admitted "
        "but unplaced | quota GPU·s reserved, not admitted | submit → all Running p50 / p95 "
        "(reached) | idle GPU·s while something waits | arm wall |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for f in rows:
        lines.append(
            f"| {f.arm} | {f.admitted}/{f.workloads} | {f.stuck_60s} ({f.never_bound}) | "
            f"{f.quota_gpu_s_admitted_unplaced:.0f} | {f.quota_gpu_s_reserved_not_admitted:.0f} | "
            f"{f.running_p50_s} / {f.running_p95_s} s ({f.all_running}/{f.workloads}) | "
            f"{f.idle_gpu_s_while_waiting:.0f} | {f.wall_s} s |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[Figures]:
    specs = stream(args.seed, args.workloads, args.window)
    gpus = sum(s.total_gpus for s in specs)
    print(
        f"stream (seed {args.seed}): {len(specs)} workloads "
        f"({sum(s.kind == 'jobset' for s in specs)} JobSets), {sum(s.pods for s in specs)} pods, "
        f"{gpus} GPUs over {args.window:.0f} s on {args.nodes} nodes "
        f"({args.nodes * GPUS_PER_NODE} GPUs, {args.filler} of them holding a "
        f"{FILLER_GPUS}-GPU pod Kueue does not manage); quota {args.quota} GPUs × 2 "
        "ClusterQueues in one cohort",
        file=sys.stderr,
    )
    rows: list[Figures] = []
    with playground(args.nodes, args.kubeconfig) as kubeconfig:
        kube = await KubeClient.connect(kubeconfig)
        run = f"{int(time.time()) % 100000}"
        filler = f"kb{run}-tenant"
        try:
            held = await fill(kube, filler, args.filler)
            for arm in args.arms:
                figures = await Arm(kube, arm, specs, args, run, held).run()
                print(json.dumps(asdict(figures)), file=sys.stderr)
                rows.append(figures)
        finally:
            with contextlib.suppress(KubeError):
                await kube.delete_collection(PODS, namespace=filler, grace_period_seconds=0)
            await kube.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--filler", type=int, default=None)
    parser.add_argument("--workloads", type=int, default=24)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--drain", type=float, default=120.0)
    parser.add_argument("--quota", type=int, default=128)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--arms", type=lambda s: s.split(","), default=list(ARMS))
    parser.add_argument("--kubeconfig")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.filler is None:
        args.filler = args.nodes // 2
    bad = [a for a in args.arms if a not in ARMS]
    if bad:
        parser.error(f"--arms: unknown {', '.join(bad)} (expected {', '.join(ARMS)})")
    rows = asyncio.run(main_async(args))
    print(json.dumps([asdict(r) for r in rows]) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
