"""DRA on the test control plane: nodes whose GPUs are NVIDIA DRA devices, claims, and reading
back what a scheduler allocated.

- :func:`dra_node` — a Ready Node from a hardware profile without device-plugin resources, the
  DeviceClasses and its ResourceSlice exactly as NVIDIA's DRA driver publishes them
  (``devcluster.dra``; device ``gpu-<i>`` carries the UUID the node's agent reports for GPU
  ``i``). ``GpuCluster.add_node(..., dra=True)`` does the same for a Topos cluster.
- :func:`gpu_class`, :func:`node_slice` — the same objects as manifests, for an in-memory
  cluster or a DeviceClass of a test's own; :func:`memory_dra_node` — such a node on a
  ``MemoryCluster``.
- :func:`claim_template`, :func:`claim`, :func:`claim_pod` — the objects a user writes
  (``devcluster.dra``'s, which the benchmarks write too).
- :func:`pod_claim` — the claim behind a pod's claim entry (created by the controller-manager
  from a template, or by a scheduler for an extended-resource pod), once ``check`` holds for it;
  :func:`allocated_on` — such an allocation, written by hand; :func:`claim_allocation` — the
  decision a scheduler hands its writer for a stored claim.
  :func:`devices`, :func:`gpu_indices`, :func:`reserved_for`, :func:`reserved_uids` — what a
  scheduler wrote into a claim.

The ``kube_scheduler_name`` fixture (tests/conftest.py) is a real kube-scheduler; pods naming it
in ``schedulerName`` get their claims allocated, reserved and bound by Kubernetes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.devices import discover_profile
from common.kube import (
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    KubeClient,
)
from common.model import NodeTopology
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.core.dra.model import ClaimAllocation, DeviceId, DeviceResult
from devcluster.dra import (
    DRIVER,
    GPU_CLASS,
    claim,
    claim_pod,
    claim_template,
    device_classes,
    node_devices,
    publish_classes,
    publish_node,
    resource_slice,
)
from devcluster.kube_wait import wait_for, wait_for_object
from devcluster.nodes import SimNode, register

EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"
PROTECTION = "resource.kubernetes.io/delete-protection"


async def dra_node(
    kube: KubeClient, name: str, profile: str, *, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Ready, untainted Node ``name`` of ``profile`` whose GPUs are DRA devices only; returns
    its ResourceSlice as the API server stored it."""
    topology = discover_profile(profile, hostname=name)
    sim = SimNode(name=name, profile=profile, leaf="leaf-0", spine="spine-0", topology=topology)
    await register(kube, [sim], device_plugin=False)
    if labels:
        await kube.patch(NODES, name, {"metadata": {"labels": dict(labels)}})
    await publish_classes(kube)
    return await publish_node(kube, name, profile)


def gpu_class(name: str = GPU_CLASS, *, extended: bool = False) -> dict[str, Any]:
    """NVIDIA's GPU DeviceClass named ``name``; ``extended``: it keeps serving ``nvidia.com/gpu``
    (KEP-5004) as the driver's own does, otherwise it serves claims only."""
    body = next(c for c in device_classes() if c["metadata"]["name"] == GPU_CLASS)
    body["metadata"]["name"] = name
    if not extended:
        del body["spec"]["extendedResourceName"]
    return body


def node_slice(node: str, profile: str) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's driver publishes for ``node``, a machine of ``profile``, named
    ``<node>-gpu.nvidia.com`` (for a store that needs a name, e.g. ``MemoryCluster.dra``)."""
    body = resource_slice(node, node_devices(profile, node))
    body["metadata"] = {"name": f"{node}-{DRIVER}"}
    return body


def memory_dra_node(
    cluster: MemoryCluster, name: str, profile: str, *, plugin: bool = False
) -> NodeTopology:
    """A node of ``profile`` on ``cluster`` with its agent connected and its ResourceSlice
    published; ``plugin``: the device plugin also lists ``nvidia.com/gpu`` in its allocatable
    (otherwise only DRA serves its GPUs). Returns its topology."""
    topology = discover_profile(profile, hostname=name)
    if plugin:
        cluster.add_node(name, topology=topology)
    else:
        cluster.add_node(name, allocatable={"cpu": "96", "memory": "512Gi"})
        cluster.inventory.apply_hello(
            name,
            agent_id=f"memory-{name}",
            agent_version="memory",
            seq=0,
            topology=topology,
            allocations=(),
        )
    cluster.dra.put("ResourceSlice", node_slice(name, profile))
    return topology


async def pod_claim(
    kube: KubeClient,
    namespace: str,
    pod: str,
    check: Callable[[dict[str, Any]], bool],
    *,
    what: str,
) -> dict[str, Any]:
    """The claim behind pod ``pod``'s claim (its ``resourceClaimStatuses``, else its
    ``extendedResourceClaimStatus``), once ``check(claim)`` holds."""
    obj = await wait_for_object(
        kube,
        PODS,
        pod,
        lambda p: _claim_name(p) is not None,
        namespace=namespace,
        what=f"a claim named in pod {pod}'s status",
    )
    name = _claim_name(obj)
    return await wait_for_object(
        kube, RESOURCE_CLAIMS, str(name), check, namespace=namespace, what=what
    )


def _claim_name(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    for entry in status.get("resourceClaimStatuses") or ():
        if entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    extended = status.get("extendedResourceClaimStatus") or {}
    return str(extended["resourceClaimName"]) if extended.get("resourceClaimName") else None


def allocated(claim: Mapping[str, Any]) -> bool:
    return bool(((claim.get("status") or {}).get("allocation") or {}).get("devices"))


def devices(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every device allocated in ``claim``, sorted."""
    results = claim["status"]["allocation"]["devices"]["results"]
    return sorted((r["driver"], r["pool"], r["device"]) for r in results)


def allocated_on(node: str, devices: Sequence[str], request: str = "gpus") -> dict[str, Any]:
    """A claim's ``status.allocation`` holding ``devices`` of ``node``'s pool for ``request``, as
    a scheduler writes it."""
    results = [{"request": request, "driver": DRIVER, "pool": node, "device": d} for d in devices]
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"devices": {"results": results}, "nodeSelector": {"nodeSelectorTerms": [term]}}


def claim_allocation(
    claim: Mapping[str, Any],
    node: str,
    *devices: str,
    config: tuple[Mapping[str, Any], ...] = (),
) -> ClaimAllocation:
    """The allocation of ``devices`` of ``node``'s pool to the stored ``claim``'s request
    ``gpus``, as the core decides it."""
    meta = claim["metadata"]
    return ClaimAllocation(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        resource_version=meta["resourceVersion"],
        node=node,
        results=tuple(DeviceResult("gpus", DeviceId(DRIVER, node, d)) for d in devices),
        config=config,
    )


def gpu_indices(claim: Mapping[str, Any]) -> list[int]:
    """The minors of the GPUs (``gpu-<minor>``) allocated in ``claim``, sorted."""
    return sorted(int(device.removeprefix("gpu-")) for _, _, device in devices(claim))


def reserved_for(claim: Mapping[str, Any]) -> list[str]:
    """Names of the consumers the claim is reserved for."""
    return sorted(r["name"] for r in (claim.get("status") or {}).get("reservedFor") or ())


def reserved_uids(claim: Mapping[str, Any]) -> list[str]:
    """UIDs of the consumers the claim is reserved for, in the claim's order."""
    return [r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or ()]


async def claim_gone(kube: KubeClient, namespace: str, name: str) -> None:
    """Wait until the claim ``name`` no longer exists."""
    await wait_for(
        kube,
        RESOURCE_CLAIMS,
        lambda claims: True if not claims else None,
        namespace=namespace,
        name=name,
        what=f"claim {name} deleted",
    )


__all__ = [
    "EXTENDED_CLAIM",
    "PROTECTION",
    "allocated",
    "allocated_on",
    "claim",
    "claim_allocation",
    "claim_gone",
    "claim_pod",
    "claim_template",
    "devices",
    "dra_node",
    "gpu_class",
    "gpu_indices",
    "memory_dra_node",
    "node_slice",
    "pod_claim",
    "reserved_for",
    "reserved_uids",
]
