"""The tree's node labels from where a cluster already names its levels.

Kueue's ``Topology`` (``kueue.x-k8s.io/v1beta1``) and KAI's ``Topology`` (``kai.scheduler``) list
a cluster's levels as node labels, broadest first (``spec.levels[].nodeLabel``), for example
``[cloud.provider.com/topology-block, cloud.provider.com/topology-rack,
nvidia.com/gpu.clique, kubernetes.io/hostname]``. :func:`keys_from_levels` reads such a list as
Topos's tree (docs/topology.md): the node level (``kubernetes.io/hostname``) is implied,
``nvidia.com/gpu.clique`` is the clique, and the others, narrowest first, are the leaf, the spine
and the zone. A list that cannot be one tree is refused with a message naming the level.

When the tree comes from objects watched live (``gangs.tree.source``: Volcano HyperNodes, a
Kueue or KAI ``Topology``), the levels are written into Topos's view of each node under
:data:`SOURCE_KEYS` (``topos.io/leaf``, ``topos.io/spine``, ``topos.io/zone``): a source says,
per node, which value each of those keys has (:class:`TreeLevels`); the Node's own values of
those three keys are not read. :class:`LevelsTree` is such a source for a ``Topology``'s levels.
Where a Node's own value of one of them names another domain than the source's,
:func:`disagreement` says so (``GET /v1/domains``, ``tree_problems``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from coordinator.core.domains.cliques import CLIQUE_LABEL
from coordinator.core.domains.layout import DomainKeys

__all__ = [
    "HOSTNAME_LABEL",
    "LEVEL_KEYS",
    "NO_LEVELS",
    "SOURCE_KEYS",
    "LevelsTree",
    "TreeLevels",
    "disagreement",
    "keys_from_levels",
]

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
_TIERS: Final = ("leaf", "spine", "zone")
#: The tree's keys when a watched source names it (NVLink cliques still from GFD's label).
SOURCE_KEYS: Final = DomainKeys(
    leaf="topos.io/leaf", spine="topos.io/spine", zone="topos.io/zone", clique=CLIQUE_LABEL
)
#: The keys a source writes, narrowest first (leaf, spine, zone).
LEVEL_KEYS: Final = (SOURCE_KEYS.leaf, SOURCE_KEYS.spine, SOURCE_KEYS.zone)


class TreeLevels(Protocol):
    """A source's word on the tree: per node, the values of :data:`LEVEL_KEYS` it is in."""

    @property
    def problems(self) -> tuple[str, ...]:
        """What of the source cannot be used (each names the object and the member)."""

    def levels_of(self, node: str, labels: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
        """The node's levels (a key of :data:`LEVEL_KEYS` → the domain's name) and why a level
        it names is not used (``None``: nothing is wrong)."""


@dataclass(frozen=True, slots=True)
class LevelsTree:
    """A Kueue or KAI ``Topology``'s levels as a source: each node's levels are its own labels
    of the keys :func:`keys_from_levels` reads (a node without one is not in that level)."""

    keys: DomainKeys
    problems: tuple[str, ...] = ()

    def levels_of(self, node: str, labels: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
        out: dict[str, str] = {}
        for target, source in zip(
            LEVEL_KEYS, (self.keys.leaf, self.keys.spine, self.keys.zone), strict=True
        ):
            value = labels.get(source) if source else None
            if value:
                out[target] = value
        return out, None


def disagreement(
    node: str, own: Mapping[str, str], levels: Mapping[str, str], source: str
) -> str | None:
    """Where the Node's own labels of :data:`LEVEL_KEYS` name another domain than the ``source``
    tree puts it in (the tree's is used), or ``None``. A key the tree gives no value is not a
    disagreement: the node is simply in no domain of that level."""
    differ = [
        f"{key} is {own[key]} on the Node, {levels[key]} in the {source} tree"
        for key in LEVEL_KEYS
        if key in levels and key in own and own[key] != levels[key]
    ]
    if not differ:
        return None
    return f"node {node}: {'; '.join(differ)}: the tree's is used"


#: A source that names no level yet (nothing listed): every node is in no domain.
NO_LEVELS: Final = LevelsTree(DomainKeys(leaf="", spine="", zone="", clique=""))


def keys_from_levels(levels: Sequence[str]) -> DomainKeys:
    """The tree of ``levels`` (broadest first); ``ValueError`` naming what does not fit."""
    seen: set[str] = set()
    for level in levels:
        if level in seen:
            raise ValueError(f"level {level!r} is named twice")
        seen.add(level)
    if HOSTNAME_LABEL in levels and levels[-1] != HOSTNAME_LABEL:
        raise ValueError(f"level {HOSTNAME_LABEL!r} must be the last (the narrowest)")
    network = [lv for lv in levels if lv not in (HOSTNAME_LABEL, CLIQUE_LABEL)]
    if CLIQUE_LABEL in levels:
        above = levels.index(CLIQUE_LABEL)
        if any(levels.index(n) > above for n in network):
            below = next(n for n in network if levels.index(n) > above)
            raise ValueError(
                f"level {below!r} is below {CLIQUE_LABEL!r}: an NVLink clique sits directly "
                "above the node"
            )
    if len(network) > len(_TIERS):
        raise ValueError(
            f"{len(network)} network levels ({', '.join(network)}); Topos has three above the "
            "clique (leaf, spine, zone): drop the broadest"
        )
    tiers = dict(zip(_TIERS, reversed(network), strict=False))
    return DomainKeys(
        clique=CLIQUE_LABEL if CLIQUE_LABEL in levels else "",
        leaf=tiers.get("leaf", ""),
        spine=tiers.get("spine", ""),
        zone=tiers.get("zone", ""),
    )
