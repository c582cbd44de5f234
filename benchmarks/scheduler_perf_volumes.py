"""scheduler_perf's persistent volumes: a ``createPods`` op's ``persistentVolumeTemplatePath`` and
``persistentVolumeClaimTemplatePath``, and ``createNodes``' ``nodeAllocatableStrategy`` (CSINode
limits) — made as upstream's ``test/utils/runners.go`` (v1.36.3) makes them.

For pod ``i`` of an op in namespace ``ns`` (``CreatePodWithPersistentVolume`` with
``bindVolume``): a claim ``pvc-<i>`` from the claim template and a volume ``<ns>-vol-<i>`` from
the volume template (a CSI volume's ``volumeHandle`` is its name, an AWS EBS one's ``volumeID``
``vol-<i>``), bound to each other (the volume's ``claimRef``, the claim's ``volumeName``, both
``status.phase: Bound``, written after each create), and the pod given one volume ``vol`` that
names the claim. Upstream makes them pod by pod in the op's (and so in the measured) time; this
runner makes a step's claims and volumes before its pods, outside the measured phase, so the
figures are the schedulers' alone.

``nodeAllocatableStrategy``: each Node's ``status.allocatable`` gets ``nodeAllocatable``'s
entries, and a CSINode of the node's name lists ``csiNodeAllocatable``'s drivers (their
``allocatable``) with ``migratedPlugins`` in its migrated-plugins annotation.

After each turn the claims and volumes go (their protection finalizers lifted: no controller
here does it). Before they go, :func:`attach_count` counts the volumes each Node's pods attach per
CSI driver, as kube-scheduler's NodeVolumeLimits counts them, against the Node's CSINode limit:
a scheduler that put more on a Node than its limit shows in the run's summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.scheduler_perf_objects import WorkloadError
from common.kube import PODS, KubeClient
from common.kube.errors import AlreadyExists, NotFound
from common.kube.resources import Resource

__all__ = [
    "CSI_NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "AttachCount",
    "NodeAllocatable",
    "Volumes",
    "allocatable_strategy",
    "attach_count",
    "attached",
    "clear_volumes",
    "create_csinodes",
    "create_volumes",
    "csinode_body",
    "node_limits",
    "pod_with_claim",
    "volume_pair",
    "volumes_of",
]

PERSISTENT_VOLUMES = Resource(
    "", "v1", "persistentvolumes", namespaced=False, kind="PersistentVolume"
)
PERSISTENT_VOLUME_CLAIMS = Resource(
    "", "v1", "persistentvolumeclaims", namespaced=True, kind="PersistentVolumeClaim"
)
CSI_NODES = Resource("storage.k8s.io", "v1", "csinodes", namespaced=False, kind="CSINode")
MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"  # v1.MigratedPluginsAnnotationKey
#: The CSI driver of the in-tree volumes the templates use (csi-translation-lib's for AWS EBS)
AWS_EBS_DRIVER = "ebs.csi.aws.com"
WRITERS = 30  # upstream's ParallelizeUntil workers


@dataclass(frozen=True, slots=True)
class Volumes:
    """A createPods op's volume and claim templates (read whole, as upstream's getSpecFromFile)."""

    volume: Mapping[str, Any]
    claim: Mapping[str, Any]


def volumes_of(
    volume: Mapping[str, Any] | None, claim: Mapping[str, Any] | None, where: str
) -> Volumes | None:
    """Both templates, or neither (upstream ignores a volume template without a claim one and
    fails on a claim template without a volume one: both are refused here)."""
    if volume is None and claim is None:
        return None
    if volume is None or claim is None:
        missing = (
            "persistentVolumeTemplatePath"
            if volume is None
            else "persistentVolumeClaimTemplatePath"
        )
        raise WorkloadError(f"{where}.{missing}: not set, and the other template is")
    for body, kind, key in (
        (volume, "PersistentVolume", "persistentVolumeTemplatePath"),
        (claim, "PersistentVolumeClaim", "persistentVolumeClaimTemplatePath"),
    ):
        if body.get("kind") != kind:
            raise WorkloadError(f"{where}.{key}: a {body.get('kind')!r}, not a {kind}")
    return Volumes(volume, claim)


def volume_pair(volumes: Volumes, namespace: str, i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pod ``i``'s claim and volume, bound to each other (see the module)."""
    claim_name = f"pvc-{i}"
    claim: dict[str, Any] = copy.deepcopy(dict(volumes.claim))
    claim.setdefault("metadata", {})["name"] = claim_name
    volume: dict[str, Any] = copy.deepcopy(dict(volumes.volume))
    name = f"{namespace}-vol-{i}"
    volume.setdefault("metadata", {})["name"] = name
    spec = volume.setdefault("spec", {})
    if "csi" in spec:
        spec["csi"]["volumeHandle"] = name
    elif "awsElasticBlockStore" in spec:
        spec["awsElasticBlockStore"]["volumeID"] = f"vol-{i}"
    spec["claimRef"] = {
        "kind": "PersistentVolumeClaim",
        "namespace": namespace,
        "name": claim_name,
        "apiVersion": "v1",
    }
    volume["status"] = {"phase": "Bound"}
    claim.setdefault("spec", {})["volumeName"] = name
    claim["status"] = {"phase": "Bound"}
    return claim, volume


def pod_with_claim(pod: Mapping[str, Any], i: int) -> dict[str, Any]:
    """The pod with one volume naming claim ``pvc-<i>`` (replacing the template's volumes)."""
    volume = {"name": "vol", "persistentVolumeClaim": {"claimName": f"pvc-{i}"}}
    return {**pod, "spec": {**pod["spec"], "volumes": [volume]}}


async def create_volumes(
    kube: KubeClient,
    volumes: Volumes,
    namespace: str,
    count: int,
    requests: Counter[tuple[str, str, str]] | None = None,
) -> None:
    """The claims and volumes of ``count`` pods in ``namespace``, each with its status;
    ``requests``: where the benchmark's own requests are counted (made in a measured phase,
    they are not the scheduler's)."""
    sem = asyncio.Semaphore(WRITERS)
    if requests is not None:
        for resource in ("persistentvolumeclaims", "persistentvolumes"):
            requests["POST", resource, ""] += count
            requests["PUT", resource, "status"] += count

    async def one(i: int) -> None:
        claim, volume = volume_pair(volumes, namespace, i)
        async with sem:
            made = await kube.create(PERSISTENT_VOLUME_CLAIMS, claim, namespace=namespace)
            await kube.replace(
                PERSISTENT_VOLUME_CLAIMS,
                claim["metadata"]["name"],
                {**made, "status": claim["status"]},
                namespace=namespace,
                subresource="status",
            )
            made = await kube.create(PERSISTENT_VOLUMES, volume)
            await kube.replace(
                PERSISTENT_VOLUMES,
                volume["metadata"]["name"],
                {**made, "status": volume["status"]},
                subresource="status",
            )

    await asyncio.gather(*(one(i) for i in range(count)))


async def clear_volumes(kube: KubeClient, namespaces: Sequence[str]) -> int:
    """Delete the claims of ``namespaces`` and the volumes bound to them, their protection
    finalizers lifted; returns how many objects went."""
    spaces = set(namespaces)
    sem = asyncio.Semaphore(WRITERS)

    async def drop(resource: Resource, name: str, namespace: str | None) -> None:
        async with sem:
            with contextlib.suppress(NotFound):
                await kube.patch(
                    resource, name, {"metadata": {"finalizers": None}}, namespace=namespace
                )
                await kube.delete(resource, name, namespace=namespace)

    claims = [
        (c["metadata"]["name"], ns)
        for ns in sorted(spaces)
        for c in (await kube.list(PERSISTENT_VOLUME_CLAIMS, namespace=ns))["items"]
    ]
    listed = (await kube.list(PERSISTENT_VOLUMES))["items"]
    volumes = [
        v["metadata"]["name"]
        for v in listed
        if ((v.get("spec") or {}).get("claimRef") or {}).get("namespace") in spaces
    ]
    await asyncio.gather(
        *(drop(PERSISTENT_VOLUME_CLAIMS, name, ns) for name, ns in claims),
        *(drop(PERSISTENT_VOLUMES, name, None) for name in volumes),
    )
    return len(claims) + len(volumes)


@dataclass(frozen=True, slots=True)
class NodeAllocatable:
    """``nodeAllocatableStrategy``: extra ``status.allocatable`` entries, CSINode drivers'
    ``allocatable`` (driver → ``{"count": n}``), migrated in-tree plugins."""

    allocatable: Mapping[str, str]
    drivers: Mapping[str, Mapping[str, Any]]
    migrated: tuple[str, ...] = ()


def allocatable_strategy(op: Mapping[str, Any], where: str) -> NodeAllocatable | None:
    strategy = op.get("nodeAllocatableStrategy")
    if strategy is None:
        return None
    where = f"{where}.nodeAllocatableStrategy"
    if not isinstance(strategy, dict):
        raise WorkloadError(f"{where}: {strategy!r} is not a map")
    for key in strategy:
        if key not in ("nodeAllocatable", "csiNodeAllocatable", "migratedPlugins"):
            raise WorkloadError(f"{where}.{key}: not read by this runner")
    allocatable = strategy.get("nodeAllocatable") or {}
    if not isinstance(allocatable, dict) or not all(
        isinstance(v, str | int) for v in allocatable.values()
    ):
        raise WorkloadError(f"{where}.nodeAllocatable: {allocatable!r} is not a map of quantities")
    drivers = strategy.get("csiNodeAllocatable") or {}
    if not isinstance(drivers, dict) or not all(
        isinstance(v, dict) and set(v) <= {"count"} and isinstance(v.get("count", 0), int)
        for v in drivers.values()
    ):
        raise WorkloadError(
            f"{where}.csiNodeAllocatable: {drivers!r} is not a map of driver to {{count: n}}"
        )
    migrated = strategy.get("migratedPlugins") or []
    if not isinstance(migrated, list) or not all(isinstance(p, str) for p in migrated):
        raise WorkloadError(f"{where}.migratedPlugins: {migrated!r} is not a list of names")
    return NodeAllocatable(
        {str(k): str(v) for k, v in allocatable.items()}, drivers, tuple(migrated)
    )


def csinode_body(node: str, strategy: NodeAllocatable) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {
            "name": node,
            "annotations": {MIGRATED_PLUGINS: ",".join(strategy.migrated)},
        },
        "spec": {
            "drivers": [
                {"name": driver, "nodeID": node, "allocatable": dict(allocatable)}
                for driver, allocatable in strategy.drivers.items()
            ]
        },
    }


async def create_csinodes(
    kube: KubeClient, nodes: Sequence[str], strategy: NodeAllocatable
) -> None:
    sem = asyncio.Semaphore(WRITERS)

    async def one(node: str) -> None:
        async with sem:
            with contextlib.suppress(AlreadyExists):  # made for the Nodes before
                await kube.create(CSI_NODES, csinode_body(node, strategy))

    await asyncio.gather(*(one(n) for n in nodes))


def node_limits(csinodes: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Node → CSI driver → its attach limit (``spec.drivers[].allocatable.count``), as
    NodeVolumeLimits' ``getVolumeLimits`` reads a CSINode."""
    out: dict[str, dict[str, int]] = {}
    for csinode in csinodes:
        limits = out.setdefault(csinode["metadata"]["name"], {})
        for driver in (csinode.get("spec") or {}).get("drivers") or ():
            count = (driver.get("allocatable") or {}).get("count")
            if count is not None:
                limits[driver["name"]] = int(count)
    return out


def _volume_id(pv: Mapping[str, Any], migrated: bool) -> tuple[str, str] | None:
    """A PV's CSI driver and volume handle: a CSI PV's own; an AWS EBS one's translated
    (``ebs.csi.aws.com``, its ``volumeID``) where the Node has a CSINode (kube's
    ``isCSIMigrationOn``); else not counted."""
    spec = pv.get("spec") or {}
    if "csi" in spec:
        return str(spec["csi"]["driver"]), str(spec["csi"]["volumeHandle"])
    if "awsElasticBlockStore" in spec and migrated:
        return AWS_EBS_DRIVER, str(spec["awsElasticBlockStore"]["volumeID"])
    return None


def attached(
    pods: Sequence[Mapping[str, Any]],
    claims: Mapping[tuple[str, str], Mapping[str, Any]],
    volumes: Mapping[str, Mapping[str, Any]],
    limits: Mapping[str, Mapping[str, int]],
) -> dict[str, Counter[str]]:
    """Node → driver → the distinct volumes its bound pods use (a volume two pods share counts
    once), as NodeVolumeLimits' ``filterAttachableVolumes``; ``claims`` by (namespace, name)."""
    seen: dict[str, set[tuple[str, str]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        namespace = pod["metadata"].get("namespace", "")
        for vol in pod["spec"].get("volumes") or ():
            name = str((vol.get("persistentVolumeClaim") or {}).get("claimName", ""))
            claim = claims.get((namespace, name))
            pv = volumes.get(((claim or {}).get("spec") or {}).get("volumeName") or "")
            found = None if pv is None else _volume_id(pv, node in limits)
            if found is not None:
                seen.setdefault(node, set()).add(found)
    return {node: Counter(driver for driver, _ in ids) for node, ids in seen.items()}


@dataclass(frozen=True, slots=True)
class AttachCount:
    """The fullest Node's count against its limit, and the Nodes past their limit."""

    driver: str
    most: int
    limit: int
    over: int

    def line(self) -> str:
        return (
            f"CSI volumes per node ({self.driver}, NodeVolumeLimits' count): at most {self.most}"
            f" of the CSINode's {self.limit}; {self.over} nodes over it"
        )


def attach_count(
    counts: Mapping[str, Counter[str]], limits: Mapping[str, Mapping[str, int]]
) -> list[AttachCount]:
    """Per limited driver: the highest count on a Node with that limit, and how many exceed it."""
    out = []
    for driver in sorted({d for node in limits.values() for d in node}):
        pairs = [
            (counts.get(node, Counter())[driver], lim[driver])
            for node, lim in limits.items()
            if driver in lim
        ]
        most, limit = max(pairs, key=lambda p: (p[0] - p[1], p[0]))
        out.append(AttachCount(driver, most, limit, sum(1 for c, lim in pairs if c > lim)))
    return out


async def attach_counts(kube: KubeClient, namespaces: Sequence[str]) -> list[AttachCount]:
    """:func:`attach_count` of the pods bound in ``namespaces`` now (empty with no CSINode
    limit)."""
    limits = node_limits((await kube.list(CSI_NODES))["items"])
    if not any(limits.values()):
        return []
    pods: list[Mapping[str, Any]] = []
    claims: dict[tuple[str, str], Mapping[str, Any]] = {}
    for ns in namespaces:
        pods += (await kube.list(PODS, namespace=ns))["items"]
        for c in (await kube.list(PERSISTENT_VOLUME_CLAIMS, namespace=ns))["items"]:
            claims[ns, c["metadata"]["name"]] = c
    volumes = {v["metadata"]["name"]: v for v in (await kube.list(PERSISTENT_VOLUMES))["items"]}
    return attach_count(attached(pods, claims, volumes, limits), limits)
