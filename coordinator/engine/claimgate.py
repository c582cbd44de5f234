"""kube-scheduler's DynamicResources PreEnqueue: a pod is not tried while a ResourceClaim it names
does not exist (not created from its template yet, or not seen on the watch yet). The queue parks
it without an attempt (no FailedScheduling, no ``PodScheduled`` condition written) and sends it
back on the next DRA claim change (:attr:`~coordinator.core.queue.SchedulingQueue.gate`)."""

from __future__ import annotations

from collections.abc import Container

from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod
from coordinator.inventory.dra import DraStore

__all__ = ["missing_claim", "unmade_claim"]


def missing_claim(entry: QueuedPod, dra: DraStore) -> str | None:
    """Why ``entry`` may not be tried yet (a claim it names does not exist), or ``None``. A claim
    that exists but does not parse lets it through: its attempt says what is wrong with it."""
    request = entry.request
    if not isinstance(request, PodRequest):
        return None
    return unmade_claim(request, dra.objects("ResourceClaim"))


def unmade_claim(request: PodRequest, claims: Container[str]) -> str | None:
    """:func:`missing_claim` for a pod, given the ``namespace/name`` of every ResourceClaim."""
    if not request.claims or request.scheduling_gates:
        return None
    for claim in request.claims:
        name = claim.resolved_name
        if not name:
            return (
                f"waiting for resource claim {claim.name} (template {claim.template_name}) "
                "to be created"
            )
        if f"{request.namespace}/{name}" not in claims:
            return f"waiting for resource claim {name} to be created"
    return None
