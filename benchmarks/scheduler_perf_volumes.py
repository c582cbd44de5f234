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
here does it).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.scheduler_perf_objects import WorkloadError
from common.kube import KubeClient
from common.kube.errors import AlreadyExists, NotFound
from common.kube.resources import Resource

__all__ = [
    "CSI_NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "NodeAllocatable",
    "Volumes",
    "allocatable_strategy",
    "clear_volumes",
    "create_csinodes",
    "create_volumes",
    "csinode_body",
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


async def create_volumes(kube: KubeClient, volumes: Volumes, namespace: str, count: int) -> None:
    """The claims and volumes of ``count`` pods in ``namespace``, each with its status."""
    sem = asyncio.Semaphore(WRITERS)

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
