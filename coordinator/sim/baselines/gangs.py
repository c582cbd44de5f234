"""Gang baselines on the planners' capacity model
(:class:`~coordinator.core.domains.capacity.NodeState`): members placed one by one without network
domains, as a per-pod scheduler with gang admission
would, for ``benchmarks/gang_placement.py``. Each returns member → node, or None when a member
fits nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.core.domains.capacity import GPU, NodeState, fits, subtract
from coordinator.core.domains.packing import Member

__all__ = ["first_fit_members", "spread_members"]


def first_fit_members(
    members: Sequence[Member], nodes: Sequence[NodeState]
) -> dict[str, str] | None:
    """Each member on the first node (in order) where it fits; None when one fits nowhere."""
    free = {n.name: dict(n.free) for n in nodes}
    out = {}
    for m in members:
        for n in nodes:
            if fits(free[n.name], m.requests):
                subtract(free[n.name], m.requests)
                out[m.name] = n.name
                break
        else:
            return None
    return out


def spread_members(members: Sequence[Member], nodes: Sequence[NodeState]) -> dict[str, str] | None:
    """Each member on the node with the most free GPUs (kube's default spread); None when one
    fits nowhere."""
    free = {n.name: dict(n.free) for n in nodes}
    out = {}
    for m in members:
        best = None
        for n in nodes:
            room = free[n.name]
            if fits(room, m.requests) and (best is None or room[GPU] > free[best][GPU]):
                best = n.name
        if best is None:
            return None
        subtract(free[best], m.requests)
        out[m.name] = best
    return out
