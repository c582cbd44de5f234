"""``resource.k8s.io/v1`` objects for the DRA end-to-end tests, as NVIDIA's ``gpu.nvidia.com``
driver publishes them for a node (devices ``gpu-<minor>``, pool named after the node, its
``uuid``/``productName``/... attributes, ``memory`` capacity), its DeviceClass (optionally
serving ``nvidia.com/gpu`` through KEP-5004), claims, templates and pods that use them, and what
a test reads back: which GPUs a claim's allocation names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from common.model import NodeTopology, worst_link
from tests.support.pods import pod

DRIVER: Final = "gpu.nvidia.com"
CLASS_SELECTOR: Final = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)
PROTECTION: Final = "resource.kubernetes.io/delete-protection"


def gpu_slice(node: str, topology: NodeTopology) -> dict[str, Any]:
    devices = []
    for g in topology.gpus:
        bus = (g.pci_bus_id or "").lower()
        attrs: dict[str, Any] = {
            "type": {"string": "gpu"},
            "uuid": {"string": g.uuid},
            "productName": {"string": g.product or ""},
            "architecture": {"string": "Volta"},
            "cudaComputeCapability": {"version": "7.0.0"},
            "driverVersion": {"version": "550.54.15"},
            "index": {"int": g.index},
            "minor": {"int": g.index},
        }
        if bus:
            attrs["resource.kubernetes.io/pciBusID"] = {"string": bus[4:]}
            attrs["resource.kubernetes.io/pcieRoot"] = {"string": f"pci{bus[4:8]}:00"}
        devices.append(
            {
                "name": f"gpu-{g.index}",
                "attributes": attrs,
                "capacity": {"memory": {"value": f"{g.memory_total_mib or 0}Mi"}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def gpu_class(*, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": spec,
    }


def claim_spec(count: int, device_class: str = DRIVER) -> dict[str, Any]:
    request = {"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}
    return {"devices": {"requests": [request]}}


def gpu_claim(
    name: str, count: int, namespace: str | None = None, *, device_class: str = DRIVER
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": claim_spec(count, device_class),
    }


def claim_template(name: str, count: int, *, device_class: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(count, device_class)},
    }


def claim_pod(
    name: str,
    *,
    claim: str | None = None,
    template: str | None = None,
    namespace: str | None = "default",
    labels: Mapping[str, str] | None = None,
    gang: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """A pod whose container uses one claim (``resourceClaimName`` or a template); ``gang``
    makes it a member of a Topos gang."""
    entry: dict[str, Any] = {"name": "gpus"}
    if claim:
        entry["resourceClaimName"] = claim
    if template:
        entry["resourceClaimTemplateName"] = template
    extra = {"resourceClaims": [entry]}
    obj = pod(name, namespace=namespace, labels=labels, gang=gang, spec=extra)
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return obj


def allocated_devices(claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(pool, device) of every result of the claim's allocation."""
    results = claim["status"]["allocation"]["devices"]["results"]
    return [(r["pool"], r["device"]) for r in results]


def reserved_uids(claim: Mapping[str, Any]) -> list[str]:
    return [r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or []]


def gpu_indices(devices: Sequence[tuple[str, str]]) -> list[int]:
    return sorted(int(d.removeprefix("gpu-")) for _, d in devices)


def link_class(topology: NodeTopology, gpus: Sequence[int]) -> str:
    return str(worst_link(topology, gpus))
