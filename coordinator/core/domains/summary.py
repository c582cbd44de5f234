"""Per-leaf / per-spine utilisation and fragmentation: the data behind ``GET /v1/domains``.

*Fragmentation* is the count of idle GPUs stranded on partly-used nodes: a node with 3 of 8 GPUs
busy contributes 5. Those GPUs can take small pods but no whole-node (8-GPU) member of a training
gang, which is what a topology-aware packer tries to avoid. Unhealthy GPUs are neither free nor
used; unschedulable nodes are reported but their free GPUs are not offered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from coordinator.core.domains.capacity import NodeState
from coordinator.core.domains.layout import DomainKeys, Layout, build_layout, sorted_names


class DomainUsage(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    kind: str  # "clique" | "leaf" | "spine" | "zone" | "cluster"
    parent: str | None = None  # the spine of a leaf, the leaf of a clique
    nodes: int
    nodes_schedulable: int
    nodes_idle: int  # schedulable nodes with every healthy GPU free
    gpus_total: int
    gpus_free: int  # offered: free healthy GPUs on schedulable nodes
    gpus_used: int
    gpus_unhealthy: int
    utilisation: float  # used / (total - unhealthy), 0.0 for a domain without GPUs
    fragmentation: int  # idle GPUs on partly-used schedulable nodes
    fragmentation_ratio: float  # fragmentation / gpus_free (0.0 when nothing is free)
    leaves: tuple[str, ...] = ()  # a spine's leaves, natural order
    # A clique's free GPUs when some of its GPUs are busy: a gang wanting the whole rack cannot
    # have them (0 for other kinds).
    stranded: int = 0


class DomainsSummary(msgspec.Struct, frozen=True, kw_only=True):
    keys: dict[str, str]
    cluster: DomainUsage
    spines: tuple[DomainUsage, ...]
    leaves: tuple[DomainUsage, ...]
    zones: tuple[DomainUsage, ...]
    unplaced_nodes: tuple[str, ...]  # nodes with no leaf label
    inconsistent_nodes: tuple[str, ...]  # nodes whose spine label disagrees with their leaf's
    cliques: tuple[DomainUsage, ...] = ()  # NVLink cliques (NVL72 racks)
    clique_problems: dict[str, str] = msgspec.field(default_factory=dict)  # node → why no clique
    # Where the tree comes from (``gangs.tree.source``) and what of that source is not used.
    tree_source: str = "labels"
    tree_problems: tuple[str, ...] = ()


def stranded_gpus(free: int, used: int) -> int:
    """Idle GPUs stranded on a node with ``free`` idle and ``used`` busy GPUs: its idle ones
    when it is partly used, else 0. The one definition of fragmentation: ``GET /v1/domains``,
    the ``topos_domain_fragmentation_ratio`` metric, ``topos simulate`` and ``topos demo`` all
    count with it."""
    return free if used > 0 and free > 0 else 0


def node_fragmentation(node: NodeState) -> int:
    """Idle GPUs on this node if it is partly used and schedulable, else 0."""
    return stranded_gpus(node.gpus_free, node.gpus_used) if node.schedulable else 0


def fragmentation(nodes: Iterable[NodeState]) -> int:
    """Idle GPUs on partly-used nodes, over a set of nodes."""
    return sum(node_fragmentation(n) for n in nodes)


def _usage(
    name: str,
    kind: str,
    nodes: Sequence[NodeState],
    *,
    parent: str | None = None,
    leaves: tuple[str, ...] = (),
) -> DomainUsage:
    total = sum(n.gpus_total for n in nodes)
    unhealthy = sum(len(n.unhealthy_gpus) for n in nodes)
    used = sum(n.gpus_used for n in nodes)
    free = sum(max(0, n.gpus_free) for n in nodes if n.schedulable)
    frag = fragmentation(nodes)
    healthy = total - unhealthy
    return DomainUsage(
        name=name,
        kind=kind,
        parent=parent,
        nodes=len(nodes),
        nodes_schedulable=sum(1 for n in nodes if n.schedulable),
        nodes_idle=sum(1 for n in nodes if n.schedulable and n.gpus_total and n.gpus_used == 0),
        gpus_total=total,
        gpus_free=free,
        gpus_used=used,
        gpus_unhealthy=unhealthy,
        utilisation=round(used / healthy, 4) if healthy > 0 else 0.0,
        fragmentation=frag,
        fragmentation_ratio=round(frag / free, 4) if free > 0 else 0.0,
        leaves=leaves,
    )


def summarize_domains(
    nodes: Sequence[NodeState], *, keys: DomainKeys | None = None, layout: Layout | None = None
) -> DomainsSummary:
    """Utilisation and fragmentation per leaf, spine, zone and for the whole cluster."""
    layout = layout or build_layout(nodes, keys=keys)
    by_name = {n.name: n for n in nodes}

    def pick(names: Iterable[str]) -> list[NodeState]:
        return [by_name[n] for n in names if n in by_name]

    leaves = tuple(
        _usage(name, "leaf", pick(layout.leaves[name].nodes), parent=layout.leaves[name].spine)
        for name in sorted_names(layout.leaves)
    )
    spines = tuple(
        _usage(name, "spine", pick(layout.nodes_in(name)), leaves=layout.spines[name].leaves)
        for name in sorted_names(layout.spines)
    )
    zones = tuple(
        _usage(name, "zone", pick(layout.zones[name])) for name in sorted_names(layout.zones)
    )
    cliques = tuple(
        _clique_usage(name, pick(layout.cliques[name].nodes), layout.cliques[name].leaf)
        for name in sorted_names(layout.cliques)
    )
    keys = layout.keys
    return DomainsSummary(
        keys={"clique": keys.clique, "leaf": keys.leaf, "spine": keys.spine, "zone": keys.zone},
        cluster=_usage("cluster", "cluster", list(nodes)),
        spines=spines,
        leaves=leaves,
        zones=zones,
        unplaced_nodes=tuple(sorted_names(n.name for n in nodes if n.name not in layout.leaf_of)),
        inconsistent_nodes=layout.inconsistent,
        cliques=cliques,
        clique_problems=dict(sorted(layout.clique_problems.items())),
    )


def clique_stranded(nodes: Sequence[NodeState]) -> int:
    """Free GPUs of a partly used clique (schedulable trays): what a whole-rack gang cannot use.
    The domain-level counterpart of :func:`stranded_gpus`."""
    used = sum(n.gpus_used for n in nodes)
    free = sum(max(0, n.gpus_free) for n in nodes if n.schedulable)
    return stranded_gpus(free, used)


def _clique_usage(name: str, nodes: Sequence[NodeState], leaf: str | None) -> DomainUsage:
    usage = _usage(name, "clique", nodes, parent=leaf)
    return msgspec.structs.replace(usage, stranded=clique_stranded(nodes))


def summary_to_builtins(summary: DomainsSummary) -> dict[str, object]:
    """Plain JSON-ready data for the API."""
    out = msgspec.to_builtins(summary)
    assert isinstance(out, dict)
    return out


__all__ = [
    "DomainUsage",
    "DomainsSummary",
    "clique_stranded",
    "fragmentation",
    "node_fragmentation",
    "stranded_gpus",
    "summarize_domains",
    "summary_to_builtins",
]
