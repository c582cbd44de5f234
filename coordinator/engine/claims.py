"""Which ResourceClaims a decision writes before its Binding.

The core's decision lists the claims it allocated (:attr:`Decision.claims
<coordinator.core.framework.results.Decision.claims>`). A pod may also name claims that are
allocated already — a claim shared with other pods, or its own, allocated by this coordinator
before a restart killed it between the claim write and the bind — and the kubelet starts a pod
only when every claim it names is reserved for it. :func:`claims_to_write` turns those into
reserve-only writes (no results: the pod is appended to ``status.reservedFor``), whether the
core listed them (with the allocation it found, decided on the version the watch shows now) or
not; a claim already reserved for the pod needs no write at all. A claim the core allocated but
the watch shows allocated at another version since is written as decided: the precondition
fails and the pod is decided again, never double-allocated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.inventory.dra import DraStore, claim_allocated

__all__ = ["claims_to_write"]


def claims_to_write(
    request: PodRequest, decision: Decision, dra: DraStore
) -> tuple[ClaimAllocation, ...]:
    """The writes before binding ``request`` as ``decision`` says."""
    out: list[ClaimAllocation] = []
    decided: set[str] = set()
    for claim in decision.claims:
        if claim.extended or not claim.name:
            out.append(claim)
            continue
        decided.add(claim.key)
        obj = dra.raw("ResourceClaim", claim.key)
        version = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
        if obj is not None and claim_allocated(obj) and version == claim.resource_version:
            if not _reserved_for(obj, request.uid):
                out.append(dataclasses.replace(claim, results=(), config=()))
        else:
            out.append(claim)
    for pod_claim in request.claims:
        name = pod_claim.resolved_name
        key = f"{request.namespace}/{name}"
        if not name or key in decided:
            continue
        obj = dra.raw("ResourceClaim", key)
        if obj is None or not claim_allocated(obj) or _reserved_for(obj, request.uid):
            continue  # the core allocates it or explains why not; or nothing to write
        meta = obj.get("metadata") or {}
        out.append(
            ClaimAllocation(
                namespace=request.namespace,
                name=name,
                uid=str(meta.get("uid") or ""),
                resource_version=str(meta.get("resourceVersion") or ""),
                node=decision.node,
                results=(),
            )
        )
        decided.add(key)
    return tuple(out)


def _reserved_for(obj: Mapping[str, Any], uid: str) -> bool:
    status = obj.get("status") or {}
    return any(r.get("uid") == uid for r in status.get("reservedFor") or ())
