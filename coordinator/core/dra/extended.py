"""Extended resources served by DRA (KEP-5004): an unchanged pod asking ``nvidia.com/gpu: 8``
on a node whose allocatable does not list ``nvidia.com/gpu``, where a DeviceClass declares
``extendedResourceName: nvidia.com/gpu``, gets a claim made for it.

The claim is the one kube-scheduler would create: one ``exactly`` request per (container,
extended resource), named ``container-<i>-request-<j>`` (``i`` counts init containers then
containers, ``j`` is the resource's index among the container's sorted request names), sorted by
name, ``ExactCount`` of the requested amount of the mapped class. A node that lists the resource
in its allocatable keeps the device-plugin path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from coordinator.core.dra.objects import DeviceRequest, ResourceClaim, SubRequest
from coordinator.core.dra.state import DraState
from coordinator.core.podspec.claims import ContainerExtended

__all__ = ["EXTENDED_CLAIM_ANNOTATION", "ExtendedClaim", "dra_served", "extended_claim"]

#: On a claim made for a pod's extended resources (KEP-5004), as kube-scheduler marks it.
EXTENDED_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"


def dra_served(
    state: DraState, entries: Sequence[ContainerExtended]
) -> tuple[ContainerExtended, ...]:
    """The entries some DeviceClass maps (served by DRA wherever the node lacks them)."""
    return tuple(e for e in entries if e.resource in state.extended)


class ExtendedClaim:
    """The claim to create for a pod on one node, its spec and its request mappings."""

    __slots__ = ("claim", "mappings", "spec")

    def __init__(
        self,
        claim: ResourceClaim,
        spec: Mapping[str, Any],
        mappings: tuple[tuple[str, str, str], ...],
    ) -> None:
        self.claim = claim
        self.spec = spec
        self.mappings = mappings


def extended_claim(
    state: DraState,
    namespace: str,
    served: Sequence[ContainerExtended],
    allocatable: Mapping[str, int],
) -> ExtendedClaim | None:
    """The claim for the entries the node does not serve itself (``None``: nothing to claim)."""
    wanted = sorted(
        (e for e in served if allocatable.get(e.resource, 0) <= 0), key=lambda e: e.request_name
    )
    if not wanted:
        return None
    requests = []
    raw_requests = []
    for e in wanted:
        class_name = state.extended[e.resource]
        requests.append(
            DeviceRequest(e.request_name, (SubRequest(e.request_name, class_name, count=e.count),))
        )
        raw_requests.append(
            {
                "name": e.request_name,
                "exactly": {
                    "deviceClassName": class_name,
                    "allocationMode": "ExactCount",
                    "count": e.count,
                },
            }
        )
    claim = ResourceClaim(namespace, "", "", "", requests=tuple(requests))
    spec = {"devices": {"requests": raw_requests}}
    mappings = tuple((e.container, e.resource, e.request_name) for e in wanted)
    return ExtendedClaim(claim, spec, mappings)
