"""Which ResourceClaims a decision writes before its Binding.

The core's decision lists the claims it allocated (:attr:`Decision.claims
<coordinator.core.framework.results.Decision.claims>`). A pod may also name claims that are
allocated already — a claim shared with other pods, or its own, allocated by this coordinator
before a restart killed it between the claim write and the bind — and the kubelet starts a pod
only when every claim it names is reserved for it. :func:`claims_to_write` adds those as
reserve-only writes (no results: the pod is appended to ``status.reservedFor``, preconditioned on
the claim's ``resourceVersion``); a claim already reserved for the pod needs no write at all.
"""

from __future__ import annotations

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.inventory.dra import DraStore, claim_allocated

__all__ = ["claims_to_write"]


def claims_to_write(
    request: PodRequest, decision: Decision, dra: DraStore
) -> tuple[ClaimAllocation, ...]:
    """``decision.claims`` plus a reserve-only write for every other claim of the pod that is
    allocated and not reserved for it yet."""
    out = list(decision.claims)
    decided = {c.key for c in out if c.name}
    for pod_claim in request.claims:
        name = pod_claim.resolved_name
        key = f"{request.namespace}/{name}"
        if not name or key in decided:
            continue
        obj = dra.raw("ResourceClaim", key)
        if obj is None or not claim_allocated(obj):
            continue  # the core allocates it, or explains why it cannot
        status = obj.get("status") or {}
        if any(r.get("uid") == request.uid for r in status.get("reservedFor") or ()):
            continue  # ours from before (a restart between claim write and bind): only bind
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
