"""Placement quality measures shared by the simulator and the demo report.

- :func:`best_link_rank`: the best worst-link class a node's hardware offers for ``k`` GPUs (so a
  placement can be judged against what was possible, not against NVLink everywhere);
- :func:`span`: how far apart a job's pods sit in the network (``node``, ``leaf``, ``spine``,
  ``cluster``) from the nodes' leaf/spine labels.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence

from common import labels as L
from common.model import Link, NodeTopology

__all__ = ["best_link_rank", "span"]


@functools.lru_cache(maxsize=4096)
def _best(links: tuple[tuple[str, ...], ...], k: int) -> int:
    n = len(links)
    rank = [[Link.parse(cell).rank for cell in row] for row in links]
    best = 99
    for combo in itertools.combinations(range(n), k):
        worst = max(rank[a][b] for a, b in itertools.combinations(combo, 2))
        best = min(best, worst)
    return best if best != 99 else 0


def best_link_rank(topology: NodeTopology, k: int) -> int:
    """Rank (``Link.rank``, lower is closer) of the best worst link any ``k`` GPUs of this node
    have; 0 for fewer than two GPUs."""
    if k < 2 or k > len(topology.gpus):
        return 0
    return _best(topology.links, k)


def span(node_labels: Sequence[Mapping[str, str]]) -> str:
    """``node`` (one node), ``leaf`` (one leaf switch), ``spine`` (leaves of one spine) or
    ``cluster`` (wider, or a node without a leaf label)."""
    if len(node_labels) <= 1:
        return "node"
    leaves = {lab.get(L.LEAF) for lab in node_labels}
    if None in leaves:
        return "cluster"
    if len(leaves) == 1:
        return "leaf"
    spines = {lab.get(L.SPINE) for lab in node_labels}
    return "spine" if None not in spines and len(spines) == 1 else "cluster"
