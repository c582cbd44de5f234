"""``resource.k8s.io/v1`` objects for the core DRA tests, shaped as the API server returns them:
a node's slice built by NVIDIA's publisher (``devcluster.dra``) from any topology, DeviceClasses
with selectors of a test's own, claims with the uid, version and status the core reads, and pods
referencing several claims. Claims, templates and allocations as a user or scheduler writes them
are in ``tests/support/dra.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec.structs import replace

from common.model import NodeTopology
from coordinator.core.dra.state import (
    DraObjectError,
    DraState,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from devcluster.dra import DRIVER, GPU_CLASS, gpu_devices, resource_slice
from devcluster.pods import pod
from tests.support.dra import gpu_class


def gpu_slice(
    node: str,
    topo: NodeTopology,
    *,
    generation: int = 1,
    name: str | None = None,
    extra_devices: Sequence[Mapping[str, Any]] = (),
    slice_count: int = 1,
    shared: bool = False,
) -> dict[str, Any]:
    """The slice NVIDIA's driver publishes for ``topo``'s GPUs (each GPU's PCIe root is
    ``pci0000:<its NUMA node>``), plus ``extra_devices``; one of ``slice_count`` in the pool;
    ``shared``: whole GPUs shareable (consumable capacity ``memory`` and ``compute``).
    What synthetic topologies leave out is filled in (driver 550.54.15, compute capability 7.0),
    and each GPU gets an ``index`` int attribute, so selectors of every attribute type have one
    to read."""
    gpus = [replace(g, compute_capability=g.compute_capability or "7.0") for g in topo.gpus]
    devices = gpu_devices(
        gpus,
        driver_version=topo.driver_version or "550.54.15",
        cuda_version=topo.cuda_version,
        pcie_roots={g.index: f"pci0000:{g.numa_node or 0:02x}" for g in gpus},
        shared=shared,
    )
    for gpu, device in zip(gpus, devices, strict=True):
        device["attributes"]["index"] = {"int": gpu.index}
    body = resource_slice(node, [*devices, *(dict(d) for d in extra_devices)])
    body["metadata"] = {"name": name or f"{node}-{DRIVER}-slice"}
    body["spec"]["pool"].update(generation=generation, resourceSliceCount=slice_count)
    return body


def device_class(
    name: str = GPU_CLASS, selectors: Sequence[str] | None = None, *, extended: str | None = None
) -> dict[str, Any]:
    """NVIDIA's GPU DeviceClass named ``name``, its selectors replaced by ``selectors`` when
    given; ``extended``: the extended resource it serves."""
    body = gpu_class(name)
    if selectors is not None:
        body["spec"]["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if extended:
        body["spec"]["extendedResourceName"] = extended
    return body


def exactly(
    name: str = "gpus",
    count: int = 1,
    *,
    cls: str = DRIVER,
    selectors: Sequence[str] = (),
    mode: str = "ExactCount",
    tolerations: Sequence[Mapping[str, Any]] = (),
    capacity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An ``exactly`` request; ``capacity``: its ``capacity.requests``."""
    body: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if capacity is not None:
        body["capacity"] = {"requests": dict(capacity)}
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
