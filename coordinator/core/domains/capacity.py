"""The capacity view of a node that gang planning, domain selection and preemption work on.

A :class:`NodeState` is plain data: the node's labels (which carry its network domain), what it
can hold (``allocatable``) and what is still free, in integer units per resource name —
``nvidia.com/gpu`` in devices, ``cpu`` in millicores, ``memory`` in bytes, ``pods`` in pods, and
any extended resource in its own unit. :func:`node_states` derives them from the scheduling
snapshot's ``NodeInfo`` — the one derivation gang planning, preemption and ``GET /v1/domains``
use (tests build them from lists); nothing here reads the cluster. Why the planners do not work
on ``NodeInfo`` itself: docs/architecture.md#capacity-models.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, cast

from common import podkeys
from common.model import NodeTopology, topology_class
from coordinator.core.dra.demand import node_dra_gpus
from coordinator.core.dra.state import DraState
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot

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


def node_state(node: NodeInfo, dra: DraState | None = None) -> NodeState:
    """The capacity view of one snapshot node. A node whose GPUs DRA serves (its allocatable
    lists no ``nvidia.com/gpu``; ``dra`` has devices joined to its GPUs) offers those GPUs."""
    free = {name: node.free(name) for name in node.allocatable}
    free[GPU] = node.free_whole_gpus
    allocatable = node.allocatable
    unhealthy: frozenset[str] = frozenset()
    if node.topology is not None:
        unhealthy = frozenset(g.uuid for g in node.topology.gpus if not g.healthy)
        if allocatable.get(GPU, 0) <= 0 and dra is not None and node.topology.gpus:
            uuids = {g.uuid: g.index for g in node.topology.gpus if not g.mig_enabled}
            served = node_dra_gpus(dra, node.name, node.labels, uuids)
            if served:
                allocatable = {**allocatable, GPU: len(served)}
                indices = {uuids[u] for u in served}
                free[GPU] = max(
                    0, sum(i in indices for i in node.free_gpus) - node.unattributed_gpus
                )
    return NodeState(
        name=node.name,
        labels=node.labels,
        allocatable=allocatable,
        free=free,
        schedulable=node.ready and not node.unschedulable and not node.stale,
        unhealthy_gpus=unhealthy,
        link=_link_class(node.topology) if node.topology and node.topology.gpus else None,
    )


_LINKS: dict[int, tuple[NodeTopology, str]] = {}


def _link_class(topology: NodeTopology) -> str:
    """``nvswitch`` | ``nvlink`` | ``pcie``, remembered per topology object (a node keeps its
    topology object until the agent reports a change; hashing a whole topology costs more)."""
    hit = _LINKS.get(id(topology))
    if hit is not None and hit[0] is topology:
        return hit[1]
    if len(_LINKS) > 8192:
        _LINKS.clear()
    cls = topology_class(topology)
    _LINKS[id(topology)] = (topology, cls)
    return cls


#: ``NodeInfo.memo`` key of a node's capacity view: a NodeInfo never changes, and planners
#: never change a NodeState's maps in place (they copy ``free`` before they subtract), so the
#: view is built once per NodeInfo — not once per gang cycle, preemption or what-if try.
_VIEW: Final = object()


def node_states(snapshot: Snapshot) -> list[NodeState]:
    if not snapshot.dra.empty:  # DRA-served GPUs depend on the snapshot's claims too
        return [node_state(n, snapshot.dra) for n in snapshot.nodes]
    out = []
    for n in snapshot.nodes:
        view = n.memo.get(_VIEW)
        if view is None:
            view = n.memo[_VIEW] = node_state(n)
        out.append(cast(NodeState, view))
    return out


__all__ = [
    "GPU",
    "NodeState",
    "Resources",
    "add",
    "fits",
    "node_state",
    "node_states",
    "shortfall",
    "subtract",
    "total",
]
