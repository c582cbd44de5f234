"""Gang reservations applied to nodes, to show in tests what a reserved gang holds."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from coordinator.core.domains.capacity import NodeState, add, subtract
from coordinator.core.gangs.manager import Reservation


def with_reservations(
    nodes: Sequence[NodeState], reservations: Iterable[Reservation]
) -> list[NodeState]:
    """The nodes as they are once ``reservations`` hold their capacity (new objects)."""
    held: dict[str, dict[str, int]] = {}
    for r in reservations:
        add(held.setdefault(r.node, {}), r.requests)
    out: list[NodeState] = []
    for node in nodes:
        taken = held.get(node.name)
        if not taken:
            out.append(node)
            continue
        free = dict(node.free)
        subtract(free, taken)
        out.append(replace(node, free=free))
    return out
