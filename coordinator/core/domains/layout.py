"""Network domains (NVLink clique, leaf, spine, zone) read from node labels.

A cluster's fabric is described by labels on its nodes, one label key per tier. The keys are
configuration (:class:`DomainKeys`); by default ``topos.io/leaf``, ``topos.io/spine`` and
``topology.kubernetes.io/zone``. A leaf belongs to the spine its nodes name; leaves are "adjacent"
when they are neighbours in natural name order under one spine (``leaf-2`` sits between ``leaf-1``
and ``leaf-3``, and before ``leaf-10``). A node without a leaf label is in no leaf: it can still
take work on its own or at the zone/cluster tier, but never counts as "close" to anything.

Below the leaf, nodes sharing a trusted ``nvidia.com/gpu.clique`` value form an NVLink clique
(:mod:`.cliques`); a clique belongs to the leaf all its nodes name (none when they disagree or
have none). Any tier may be absent, and nodes of one cluster may have different depths.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.core.domains.capacity import NodeState
from coordinator.core.domains.cliques import CLIQUE_LABEL, read_cliques

_DIGITS = re.compile(r"(\d+)")


@functools.lru_cache(maxsize=65536)
def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting ``leaf-2`` before ``leaf-10`` (numbers compare as numbers)."""
    parts: list[tuple[int, int | str]] = []
    for i, piece in enumerate(_DIGITS.split(text)):
        if i % 2:
            parts.append((0, int(piece)))
        elif piece:
            parts.append((1, piece))
    return tuple(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainKeys:
    """Which node labels name each network tier (scheduler configuration)."""

    leaf: str = "topos.io/leaf"
    spine: str = "topos.io/spine"
    zone: str = "topology.kubernetes.io/zone"
    # The multi-node NVLink domain (GB200/GB300 NVL72 rack); "" reads no cliques.
    clique: str = CLIQUE_LABEL


@dataclass(frozen=True, slots=True)
class Clique:
    name: str
    leaf: str | None  # the leaf every node of the clique names, else None
    nodes: tuple[str, ...]  # natural name order


@dataclass(frozen=True, slots=True)
class Leaf:
    name: str
    spine: str | None
    nodes: tuple[str, ...]  # natural name order


@dataclass(frozen=True, slots=True)
class Spine:
    name: str
    leaves: tuple[str, ...]  # natural name order: neighbours are adjacent


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """The fabric as the node labels describe it, over a set of nodes."""

    keys: DomainKeys
    leaves: Mapping[str, Leaf]
    spines: Mapping[str, Spine]
    zones: Mapping[str, tuple[str, ...]]
    leaf_of: Mapping[str, str]
    spine_of: Mapping[str, str]
    zone_of: Mapping[str, str]
    # Nodes whose spine label disagrees with the one their leaf was assigned (shown in summaries).
    inconsistent: tuple[str, ...] = field(default=())
    cliques: Mapping[str, Clique] = field(default_factory=dict)
    clique_of: Mapping[str, str] = field(default_factory=dict)
    # node → why its clique label is not used (malformed, fabric degraded, odd tray)
    clique_problems: Mapping[str, str] = field(default_factory=dict)

    def kind_of(self, domain: str) -> str | None:
        """``clique`` | ``leaf`` | ``spine`` | ``zone`` for a domain name this layout knows."""
        if domain in self.cliques:
            return "clique"
        if domain in self.leaves:
            return "leaf"
        if domain in self.spines:
            return "spine"
        if domain in self.zones:
            return "zone"
        return None

    def nodes_in(self, domain: str) -> tuple[str, ...]:
        """Node names inside a leaf, spine or zone (empty for an unknown name)."""
        kind = self.kind_of(domain)
        if kind == "clique":
            return self.cliques[domain].nodes
        if kind == "leaf":
            return self.leaves[domain].nodes
        if kind == "spine":
            return tuple(n for leaf in self.spines[domain].leaves for n in self.leaves[leaf].nodes)
        if kind == "zone":
            return self.zones[domain]
        return ()


def build_layout(nodes: Iterable[NodeState], *, keys: DomainKeys | None = None) -> Layout:
    """Group nodes into leaves, spines and zones from their labels."""
    keys = keys or DomainKeys()
    nodes = list(nodes)
    leaf_nodes: dict[str, list[str]] = {}
    leaf_spine: dict[str, str | None] = {}
    zone_nodes: dict[str, list[str]] = {}
    leaf_of: dict[str, str] = {}
    spine_of: dict[str, str] = {}
    zone_of: dict[str, str] = {}
    inconsistent: list[str] = []
    for node in sorted(nodes, key=lambda n: natural_key(n.name)):
        leaf = node.labels.get(keys.leaf) or None
        spine = node.labels.get(keys.spine) or None
        zone = node.labels.get(keys.zone) or None
        if zone is not None:
            zone_nodes.setdefault(zone, []).append(node.name)
            zone_of[node.name] = zone
        if spine is not None:
            spine_of[node.name] = spine
        if leaf is None:
            continue
        leaf_of[node.name] = leaf
        leaf_nodes.setdefault(leaf, []).append(node.name)
        if leaf not in leaf_spine:
            leaf_spine[leaf] = spine
        elif leaf_spine[leaf] != spine:
            inconsistent.append(node.name)
    leaves = {
        name: Leaf(name, leaf_spine[name], tuple(members)) for name, members in leaf_nodes.items()
    }
    spine_leaves: dict[str, list[str]] = {}
    for entry in leaves.values():
        if entry.spine is not None:
            spine_leaves.setdefault(entry.spine, []).append(entry.name)
    spines = {
        name: Spine(name, tuple(sorted(members, key=natural_key)))
        for name, members in spine_leaves.items()
    }
    reading = read_cliques(nodes, keys.clique, leaf_of)
    clique_nodes: dict[str, list[str]] = {}
    for name in sorted(reading.clique_of, key=natural_key):
        clique_nodes.setdefault(reading.clique_of[name], []).append(name)
    cliques: dict[str, Clique] = {}
    for name, members in clique_nodes.items():
        clique_leaves = {leaf_of.get(n) for n in members}
        leaf = clique_leaves.pop() if len(clique_leaves) == 1 else None
        cliques[name] = Clique(name, leaf, tuple(members))
    return Layout(
        keys=keys,
        leaves=leaves,
        spines=spines,
        zones={z: tuple(ns) for z, ns in zone_nodes.items()},
        leaf_of=leaf_of,
        spine_of=spine_of,
        zone_of=zone_of,
        inconsistent=tuple(inconsistent),
        cliques=cliques,
        clique_of=reading.clique_of,
        clique_problems=reading.problems,
    )


def sorted_names(names: Iterable[str]) -> list[str]:
    return sorted(names, key=natural_key)


def adjacent_windows(items: Sequence[str], width: int) -> list[tuple[str, ...]]:
    """Every run of ``width`` neighbours in ``items`` (in order)."""
    if width <= 0 or width > len(items):
        return []
    return [tuple(items[i : i + width]) for i in range(len(items) - width + 1)]


__all__ = [
    "Clique",
    "DomainKeys",
    "Layout",
    "Leaf",
    "Spine",
    "adjacent_windows",
    "build_layout",
    "natural_key",
    "sorted_names",
]
