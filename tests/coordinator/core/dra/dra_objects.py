"""``resource.k8s.io/v1`` objects for the core DRA tests, shaped as the API server returns them:
slices as NVIDIA's ``gpu.nvidia.com`` driver publishes a node's GPUs (devices ``gpu-<minor>``,
pool named after the node, ``uuid``/``productName``/... attributes, ``memory`` capacity), its
DeviceClass, claims, and pods referencing claims."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.model import NodeTopology
from coordinator.core.dra.state import (
    DraObjectError,
    DraState,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from tests.support.pods import pod

DRIVER = "gpu.nvidia.com"
GPU_CLASS_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)


def gpu_slice(
    node: str,
    topo: NodeTopology,
    *,
    generation: int = 1,
    name: str | None = None,
    extra_devices: Sequence[Mapping[str, Any]] = (),
    slice_count: int = 1,
) -> dict[str, Any]:
    devices = []
    for g in topo.gpus:
        attrs: dict[str, Any] = {
            "type": {"string": "gpu"},
            "uuid": {"string": g.uuid},
            "productName": {"string": g.product or ""},
            "architecture": {"string": "Volta"},
            "cudaComputeCapability": {"version": "7.0.0"},
            "driverVersion": {"version": "550.54.15"},
            "index": {"int": g.index},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{g.numa_node or 0:02x}"},
        }
        devices.append(
            {
                "name": f"gpu-{g.index}",
                "attributes": attrs,
                "capacity": {"memory": {"value": f"{g.memory_total_mib or 0}Mi"}},
            }
        )
    devices.extend(dict(d) for d in extra_devices)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": slice_count},
            "devices": devices,
        },
    }


def device_class(
    name: str = DRIVER,
    selectors: Sequence[str] = (GPU_CLASS_SELECTOR,),
    *,
    extended: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def exactly(
    name: str = "gpus",
    count: int = 1,
    *,
    cls: str = DRIVER,
    selectors: Sequence[str] = (),
    mode: str = "ExactCount",
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if tolerations:
        body["tolerations"] = [dict(t) for t in tolerations]
    return {"name": name, "exactly": body}


def claim(
    name: str,
    requests: Sequence[Mapping[str, Any]] = (),
    *,
    namespace: str = "default",
    constraints: Sequence[Mapping[str, Any]] = (),
    allocation: Mapping[str, Any] | None = None,
    reserved_for: Sequence[str] = (),
    resource_version: str = "1",
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocation is not None:
        status["allocation"] = dict(allocation)
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": u, "uid": u} for u in reserved_for]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": resource_version,
        },
        "spec": {"devices": {"requests": list(requests), "constraints": list(constraints)}},
        "status": status,
    }


def allocated_on(node: str, devices: Sequence[str], request: str = "gpus") -> dict[str, Any]:
    """A ``status.allocation`` holding ``devices`` of the node's pool."""
    return {
        "devices": {
            "results": [
                {"request": request, "driver": DRIVER, "pool": node, "device": d} for d in devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def claim_pod(name: str, *claims: str, template: str | None = None, **kw: Any) -> dict[str, Any]:
    """A pod referencing ``claims`` by name (``template``: one entry from a template)."""
    entries: list[dict[str, Any]] = [{"name": c, "resourceClaimName": c} for c in claims]
    if template is not None:
        entries.append({"name": "from-template", "resourceClaimTemplateName": template})
    obj = pod(name, **kw)
    obj["spec"]["resourceClaims"] = entries
    return obj


def state(
    slices: Sequence[Mapping[str, Any]] = (),
    classes: Sequence[Mapping[str, Any]] = (device_class(),),
    claims: Sequence[Mapping[str, Any]] = (),
) -> DraState:
    parsed_slices = [parse_resource_slice(s) for s in slices]
    parsed_classes = [parse_device_class(c) for c in classes]
    parsed_claims = [parse_resource_claim(c) for c in claims]
    for obj in (*parsed_slices, *parsed_classes, *parsed_claims):
        assert not isinstance(obj, DraObjectError), obj
    return DraState(parsed_slices, parsed_classes, parsed_claims)  # type: ignore[arg-type]
