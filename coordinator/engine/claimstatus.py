"""What a :class:`~coordinator.core.dra.model.ClaimAllocation` looks like written into a
ResourceClaim — the same for every cluster writer (the API server's and the in-memory one).

``status.allocation`` is what kube-scheduler's structured allocator writes: ``devices.results``
(request, driver, pool, device; ``adminAccess`` when asked; ``shareID`` and
``consumedCapacity`` for a share of a device allowing multiple allocations), ``devices.config``
(the class's opaque config, ``source: FromClass`` unless the core says otherwise) and a
``nodeSelector`` requiring ``metadata.name`` of the chosen node. The pod enters
``status.reservedFor`` as ``{resource: pods, name, uid}``.
"""

from __future__ import annotations

from typing import Any, Final

from coordinator.core.dra.capacity import format_quantity
from coordinator.core.dra.extended import EXTENDED_CLAIM_ANNOTATION
from coordinator.core.dra.model import ClaimAllocation
from coordinator.engine.ports import PodRef

__all__ = [
    "DELETE_PROTECTION",
    "EXTENDED_CLAIM_ANNOTATION",
    "allocation_status",
    "consumer",
    "extended_claim_status",
]

#: The finalizer a scheduler puts on a claim it allocates (kube-controller-manager removes it
#: when it deallocates the claim).
DELETE_PROTECTION: Final = "resource.kubernetes.io/delete-protection"
#: Marks a claim created for a pod's extended resources (KEP-5004).


def consumer(pod: PodRef) -> dict[str, str]:
    """The pod's entry in ``status.reservedFor``."""
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


def allocation_status(claim: ClaimAllocation) -> dict[str, Any]:
    """``status.allocation`` for ``claim``."""
    results: list[dict[str, Any]] = []
    for result in claim.results:
        entry: dict[str, Any] = {
            "request": result.request,
            "driver": result.device.driver,
            "pool": result.device.pool,
            "device": result.device.device,
        }
        if result.admin_access:
            entry["adminAccess"] = True
        if result.share_id:
            entry["shareID"] = result.share_id
            entry["consumedCapacity"] = {n: format_quantity(q) for n, q in result.consumed}
        results.append(entry)
    devices: dict[str, Any] = {"results": results}
    if claim.config:
        devices["config"] = [{"source": "FromClass", **dict(c)} for c in claim.config]
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [claim.node]}]}
    return {"devices": devices, "nodeSelector": {"nodeSelectorTerms": [term]}}


def extended_claim_status(claim: ClaimAllocation) -> dict[str, Any]:
    """The pod's ``status.extendedResourceClaimStatus`` naming its extended-resource claim."""
    mappings = [
        {"containerName": c, "resourceName": r, "requestName": q}
        for c, r, q in claim.extended_requests
    ]
    return {"requestMappings": mappings, "resourceClaimName": claim.name}
