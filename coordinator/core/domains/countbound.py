"""Whether a group could fit at all, from GPU counts alone: a necessary condition checked before
a full placement (:func:`~coordinator.core.domains.select.place_members`) that cannot succeed.

It counts what every placement rule only narrows: whole free GPUs on schedulable nodes, and for a
group that must stay in one spine (``latency-sensitive``, ``network-bandwidth``) the GPUs of one
spine — or of the nodes in no spine, all together, since a node or leaf outside every spine may
hold such a group too. Taints, affinity, other resources, link classes and domain limits can
only refuse more. ``False`` means no placement exists; ``True`` means only that one may::

    may_fit([8] * 64, nodes, intent=PlacementIntent(latency_sensitive=True), layout=layout)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import Layout
from coordinator.core.domains.strategy import PlacementIntent

__all__ = ["may_fit"]


def may_fit(
    asks: Sequence[int],
    nodes: Sequence[NodeState],
    *,
    intent: PlacementIntent | None,
    layout: Layout,
    needed: int | None = None,
    gained: Mapping[str, int] | None = None,
) -> bool:
    """``asks``: whole GPUs each member asks for; ``needed``: how many of them must be placed
    (a gang's minimum; default all); ``gained``: GPUs each node would have free beyond its
    ``free`` (pods evicted from it). Members asking no GPU (MIG, shares, DRA) are not counted:
    the answer is then ``True`` unless the GPU-asking ones alone cannot fit."""
    gained = gained or {}
    want = sorted(a for a in asks if a > 0)
    count = len(asks) if needed is None else min(needed, len(asks))
    # The members that must be placed ask at least the ``count`` smallest asks; GPU-less ones
    # are the cheapest to place, so only those beyond them are surely GPU-asking.
    gpu_members = max(0, count - (len(asks) - len(want)))
    if gpu_members == 0:
        return True
    smallest = want[:gpu_members]
    groups: list[list[NodeState]]
    if intent is not None and intent.single_spine and layout.spines:
        by_name = {n.name: n for n in nodes}
        inside: set[str] = set()
        groups = []
        for spine in layout.spines:
            names = layout.nodes_in(spine)
            inside.update(names)
            groups.append([by_name[n] for n in names if n in by_name])
        groups.append([n for n in nodes if n.name not in inside])
    else:
        groups = [list(nodes)]
    total_ask = sum(smallest)
    for group in groups:
        free = [max(0, n.free.get(GPU, 0) + gained.get(n.name, 0)) for n in group if n.schedulable]
        if sum(free) < total_ask:
            continue
        # Each of them takes at least the smallest ask on one node.
        if sum(f // smallest[0] for f in free) >= gpu_members:
            return True
    return False
