"""The tree's node labels from where a cluster already names its levels.

Kueue's ``Topology`` (``kueue.x-k8s.io/v1beta1``) and KAI's ``Topology`` (``kai.scheduler``) list
a cluster's levels as node labels, broadest first (``spec.levels[].nodeLabel``), for example
``[cloud.provider.com/topology-block, cloud.provider.com/topology-rack,
nvidia.com/gpu.clique, kubernetes.io/hostname]``. :func:`keys_from_levels` reads such a list as
Topos's tree (docs/topology.md): the node level (``kubernetes.io/hostname``) is implied,
``nvidia.com/gpu.clique`` is the clique, and the others, narrowest first, are the leaf, the spine
and the zone. A list that cannot be one tree is refused with a message naming the level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from coordinator.core.domains.cliques import CLIQUE_LABEL
from coordinator.core.domains.layout import DomainKeys

__all__ = ["HOSTNAME_LABEL", "keys_from_levels"]

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
_TIERS: Final = ("leaf", "spine", "zone")


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
