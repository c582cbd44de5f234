"""What a scheduling decision allocates through DRA, in the shape the writer puts it into a
ResourceClaim's ``status.allocation``.

These types are the boundary between the pure core (which chooses devices) and the adapters
(which write claims before binding): the core fills :attr:`Decision.claims
<coordinator.core.framework.results.Decision.claims>`, the writer turns each
:class:`ClaimAllocation` into a claim status update (or, for an extended-resource pod, a new
claim) before the Binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

__all__ = ["ClaimAllocation", "DeviceId", "DeviceResult"]


@dataclass(frozen=True, slots=True, order=True)
class DeviceId:
    """One device of a ResourceSlice: ``driver``/``pool``/``device``."""

    driver: str
    pool: str
    device: str
    #: the hash, computed once: ids are looked up in sets per device per node per cycle
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.driver, self.pool, self.device)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:  # the device name differs first, if anything
        if other.__class__ is not DeviceId:
            return NotImplemented
        o: DeviceId = other
        return self.device == o.device and self.pool == o.pool and self.driver == o.driver

    def __reduce__(self) -> tuple[type[DeviceId], tuple[str, str, str]]:
        # the hash of a string differs from process to process: recomputed when unpickled
        return DeviceId, (self.driver, self.pool, self.device)

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One entry of ``status.allocation.devices.results``. ``request`` is the request's name,
    ``<request>/<subrequest>`` when a ``firstAvailable`` alternative was taken. A share of a
    device that allows multiple allocations has a ``share_id`` (a fresh UUID per share) and
    what it ``consumed`` of each capacity (``consumedCapacity``)."""

    request: str
    device: DeviceId
    admin_access: bool = False
    consumed: tuple[tuple[str, Fraction], ...] = ()
    share_id: str = ""


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The devices chosen for one ResourceClaim of a pod, on ``node``.

    For a claim that exists (``resourceClaimName`` or created from a template) ``name``, ``uid``
    and ``resource_version`` identify the claim version the choice was made against: the writer
    updates its status with that ``resourceVersion`` as precondition, so a claim changed (or
    allocated by someone else) meanwhile is a conflict, never a double allocation.

    For an unchanged pod asking an extended resource served by DRA (KEP-5004) there is no claim
    yet: ``name``/``uid``/``resource_version`` are empty and ``spec`` holds the claim spec to
    create (owned by the pod, annotated ``resource.kubernetes.io/extended-resource-claim:
    "true"``); ``extended_requests`` maps (container name, resource name) to the request name,
    for ``pod.status.extendedResourceClaimStatus``.
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    node: str
    results: tuple[DeviceResult, ...]
    # Device-class config copied into status.allocation.devices.config (opaque driver config).
    config: tuple[Mapping[str, Any], ...] = ()
    spec: Mapping[str, Any] | None = None  # set only for a claim to create (KEP-5004)
    extended_requests: tuple[tuple[str, str, str], ...] = field(default=())
    # The claim was allocated already (by us earlier, or by anyone): ``results`` repeat its
    # allocation and only ``reservedFor`` needs the pod added.
    reserve_only: bool = False
    #: The claim's finalizers at ``resource_version`` (``None``: not known), so the writer adds
    #: its own in one request.
    finalizers: tuple[str, ...] | None = None

    @property
    def extended(self) -> bool:
        return self.spec is not None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
