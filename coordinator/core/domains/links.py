"""GPU link class before packing: a gang takes the best-joined GPUs its members can all get.

Nodes are ranked by how their GPUs are joined (``nvswitch`` before ``nvlink`` before ``pcie``,
nodes whose class is unknown last). A gang asking for two GPUs or more is searched first on the
nodes of the best class alone, then on that class and the next, and so on: the first search that
holds every member wins, and only then do the network rules and the strategy's packing order
choose among those nodes. So a consolidated training gang goes to idle NVSwitch nodes even when
two PCIe nodes would hold it in fewer machines, and it falls back to PCIe only when the better
nodes cannot take it. The note on the placement says which class it got and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Final

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Packing, Placement

__all__ = ["LINK_CLASSES", "best_link_first", "link_rank"]

#: Best first; a node with none of these (no topology yet) ranks after them all.
LINK_CLASSES: Final = ("nvswitch", "nvlink", "pcie")
_UNKNOWN: Final = len(LINK_CLASSES)

Search = Callable[[Packing, set[str]], Placement | None]


def link_rank(node: NodeState) -> int:
    try:
        return LINK_CLASSES.index(node.link or "")
    except ValueError:
        return _UNKNOWN


def _name(rank: int) -> str:
    return LINK_CLASSES[rank] if rank < _UNKNOWN else "unknown-link"


def _names(ranks: Iterable[int]) -> str:
    return "/".join(_name(r) for r in sorted(ranks))


def best_link_first(ctx: Packing, scope: set[str], search: Search) -> Placement | None:
    """``search`` on the best-joined nodes of ``scope`` first, widening one class at a time."""
    if sum(m.requests.get(GPU, 0) for m in ctx.members) < 2:
        return search(ctx, scope)  # no GPU talks to another GPU: links do not matter
    rank = {n: link_rank(ctx.nodes[n]) for n in scope}
    # Classes on offer: nodes with a free GPU. Every cut also keeps nodes no better class covers.
    offered = sorted({rank[n] for n in scope if ctx.nodes[n].gpus_free > 0})
    if len(offered) <= 1:
        found = search(ctx, scope)
        if found is None or not offered or offered[0] == _UNKNOWN:
            return found
        return replace(found, link=_name(offered[0]))
    for i, cut in enumerate(offered):
        last = i == len(offered) - 1
        sub = scope if last else {n for n in scope if rank[n] <= cut}
        found = search(ctx, sub)
        if found is None:
            continue
        worst = max(rank[n] for n in found.nodes)
        got = _name(worst)
        if i == 0:
            passed = [r for r in offered if r > cut]
            note = f"GPU links {got}: the best class on offer ({_names(passed)} nodes passed over)"
        else:
            better = [r for r in offered if r < cut]
            note = f"GPU links {got}: {_names(better)} nodes alone could not hold every member"
        return replace(found, link=None if worst == _UNKNOWN else got, notes=(*found.notes, note))
    return None
