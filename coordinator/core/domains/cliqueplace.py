"""The NVLink-clique tiers of :func:`~.select.place_members`, between one node and one leaf.

A multi-node group that fits in one clique (an NVL72 rack) goes there — the clique the strategy
ranks best (``balanced``: the one left with the fewest free GPUs, so partly used racks fill up
before whole ones are broken into; ``consolidated``: the fewest nodes). A group no clique holds
is split across the fewest cliques of one leaf: the roomiest cliques first, the last one the
tightest that completes the group. Leaf nodes with no clique count as cliques of one node. Wider
tiers keep a group's nodes clique by clique (:func:`clique_order`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coordinator.core.domains.layout import natural_key
from coordinator.core.domains.packing import Packing, Placement
from coordinator.core.domains.strategy import Strategy

__all__ = ["clique_order", "fewest_cliques", "one_clique"]

Rank = tuple[int, int]


def _rank(ctx: Packing, names: Sequence[str], used: dict[str, str]) -> Rank:
    nodes_used = len(set(used.values()))
    leftover = ctx.leftover_gpus(names, used)
    if ctx.intent.strategy is Strategy.CONSOLIDATED:
        return (nodes_used, leftover)
    return (leftover, nodes_used)


def _room(ctx: Packing, names: Sequence[str]) -> int:
    """Members of the group's first (biggest) shape these nodes hold on their own."""
    slots = ctx.slots[ctx.shape_of[ctx.order[0].name]]
    return sum(slots.get(n, 0) for n in names)


def one_clique(ctx: Packing, scope: set[str]) -> Placement | None:
    """The best clique that holds every member, or None."""
    best: tuple[Rank, tuple[object, ...], str, dict[str, str]] | None = None
    tried = held = 0
    for name, clique in ctx.layout.cliques.items():
        names = [n for n in clique.nodes if n in scope]
        if len(names) < 2:
            continue
        tried += 1
        if not ctx.could_fit(names):
            continue
        used = ctx.fill(ctx.ordered(names))
        if used is None:
            continue
        held += 1
        key = (_rank(ctx, names, used), natural_key(name))
        if best is None or key < (best[0], best[1]):
            best = (key[0], key[1], name, used)
    if best is None:
        return None
    found = ctx.result("clique", best[2], best[3])
    label = ctx.layout.keys.clique
    note = f"inside one NVLink clique ({label}): {held} of {tried} cliques could hold the group"
    return _noted(found, note)


def fewest_cliques(ctx: Packing, scope: set[str]) -> Placement | None:
    """The fewest cliques of one leaf that hold every member, or None (leafless cliques are
    tried together, after the leaves)."""
    layout = ctx.layout
    groups: dict[str | None, list[tuple[str, list[str]]]] = {}
    for name, clique in layout.cliques.items():
        names = [n for n in clique.nodes if n in scope]
        if names:
            groups.setdefault(clique.leaf, []).append((name, names))
    for named in [lf for lf in groups if lf is not None]:
        loose = [n for n in layout.leaves[named].nodes if n in scope and n not in layout.clique_of]
        groups[named].extend((n, [n]) for n in loose)
    best: tuple[tuple[int, Rank], str | None, list[str], dict[str, str]] | None = None
    for leaf in sorted(groups, key=lambda lf: (lf is None, natural_key(lf or ""))):
        if best is not None and leaf is None:
            break  # a leaf's cliques before leafless ones
        parts = groups[leaf]
        if len(parts) < 2 or not ctx.could_fit([n for _, ns in parts for n in ns]):
            continue
        found = _fewest(ctx, parts)
        if found is None:
            continue
        chosen, used = found
        names = [n for g, ns in parts if g in chosen for n in ns]
        key = (len(chosen), _rank(ctx, names, used))
        if best is None or key < best[0]:
            best = (key, leaf, chosen, used)
    if best is None:
        return None
    _, home, chosen, used = best
    cliques = [c for c in chosen if c in layout.cliques]
    where = f"leaf {home}" if home is not None else "no leaf"
    note = (
        f"across {len(cliques)} NVLink cliques of {where} ({', '.join(cliques)}"
        f"{f' and {len(chosen) - len(cliques)} other nodes' if len(chosen) > len(cliques) else ''})"
        ": no one clique holds the group"
    )
    if home is None:
        return _noted(ctx.result("cluster", "cluster", used, adjacent=False), note)
    return _noted(ctx.result("leaf", home, used), note)


def _fewest(
    ctx: Packing, parts: list[tuple[str, list[str]]]
) -> tuple[list[str], dict[str, str]] | None:
    need = ctx.counts[ctx.shape_of[ctx.order[0].name]]
    room = {name: _room(ctx, names) for name, names in parts}
    nodes = dict(parts)
    # roomiest first; a real clique before a lone node of equal room
    order = sorted(room, key=lambda g: (-room[g], g not in ctx.layout.cliques, natural_key(g)))
    for width in range(1, len(order) + 1):
        head = order[: width - 1]
        have = sum(room[g] for g in head)
        rest = order[width - 1 :]
        if have + room[rest[0]] < need:
            continue
        # the last clique: the tightest that completes the group, then the roomiest
        tails = sorted(
            (g for g in rest if have + room[g] >= need), key=lambda g: (room[g], natural_key(g))
        )
        for tail in [*tails[:1], rest[0]]:
            chosen = [*head, tail]
            used = ctx.fill([n for g in chosen for n in ctx.ordered(nodes[g])])
            if used is not None:
                return chosen, used
    return None


def clique_order(ctx: Packing, names: Sequence[str]) -> list[str]:
    """``names`` clique by clique (roomiest clique first), nodes in no clique after them, each
    group in the strategy's order; just the strategy's order when the cluster has no cliques."""
    layout = ctx.layout
    if not layout.cliques or not ctx.members:
        return ctx.ordered(names)
    groups: dict[str, list[str]] = {}
    loose: list[str] = []
    for n in names:
        clique = layout.clique_of.get(n)
        if clique is None:
            loose.append(n)
        else:
            groups.setdefault(clique, []).append(n)
    room = {g: _room(ctx, ns) for g, ns in groups.items()}
    out: list[str] = []
    for g in sorted(groups, key=lambda g: (-room[g], natural_key(g))):
        out.extend(ctx.ordered(groups[g]))
    out.extend(ctx.ordered(loose))
    return out


def _noted(p: Placement, note: str) -> Placement:
    return replace(p, notes=(*p.notes, note))
