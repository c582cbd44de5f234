"""The capacity view of a node that gang planning, domain selection and preemption work on.

A :class:`NodeState` is plain data: the node's labels (which carry its network domain), what it
can hold (``allocatable``) and what is still free, in integer units per resource name —
``nvidia.com/gpu`` in devices, ``cpu`` in millicores, ``memory`` in bytes, ``pods`` in pods, and
any extended resource in its own unit. The glue builds these from the scheduling snapshot (or
tests build them from lists); nothing here reads the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from common import podkeys

GPU: Final = podkeys.GPU_RESOURCE

Resources = Mapping[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """One node as the planners see it at the start of a cycle."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Resources = field(default_factory=dict)
    free: Resources = field(default_factory=dict)
    # False for cordoned, NotReady or stale-agent nodes: nothing new lands there.
    schedulable: bool = True
    # UUIDs (or indices as strings) of GPUs the agent reported unhealthy.
    unhealthy_gpus: frozenset[str] = frozenset()
    # How the node's GPUs are joined: "nvswitch" | "nvlink" | "pcie"; None when unknown.
    link: str | None = None

    @property
    def gpus_total(self) -> int:
        return self.allocatable.get(GPU, 0)

    @property
    def gpus_free(self) -> int:
        return self.free.get(GPU, 0)

    @property
    def gpus_used(self) -> int:
        return max(0, self.gpus_total - self.gpus_free - len(self.unhealthy_gpus))


def fits(free: Resources, request: Resources) -> bool:
    """True when every positive quantity in ``request`` is available in ``free``."""
    return all(amount <= 0 or free.get(name, 0) >= amount for name, amount in request.items())


def shortfall(free: Resources, request: Resources) -> list[str]:
    """Names of the resources ``request`` needs more of than ``free`` has (sorted)."""
    return sorted(
        name for name, amount in request.items() if amount > 0 and free.get(name, 0) < amount
    )


def subtract(free: dict[str, int], request: Resources) -> None:
    """Consume ``request`` from the mutable ``free`` map (callers check :func:`fits` first)."""
    for name, amount in request.items():
        if amount:
            free[name] = free.get(name, 0) - amount


def add(free: dict[str, int], request: Resources) -> None:
    """Give ``request`` back to the mutable ``free`` map."""
    for name, amount in request.items():
        if amount:
            free[name] = free.get(name, 0) + amount


def total(requests: Iterable[Resources]) -> dict[str, int]:
    """Sum of several requests, per resource."""
    out: dict[str, int] = {}
    for request in requests:
        add(out, request)
    return out


__all__ = ["GPU", "NodeState", "Resources", "add", "fits", "shortfall", "subtract", "total"]
