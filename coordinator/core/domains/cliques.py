"""NVLink cliques: the multi-node NVLink domains (a GB200/GB300 NVL72 rack) read from node labels.

NVIDIA's GPU Feature Discovery (and the Topos agent, when GFD does not) labels every node whose
GPUs sit on a multi-node NVLink fabric with ``nvidia.com/gpu.clique=<clusterUUID>.<cliqueId>``.
Nodes with one value share an NVLink domain: a gang inside it talks over NVLink, across cliques it
falls back to the network. The clique is the tier between the node and the leaf
(docs/topology.md).

A value is trusted only when it is well formed and the node's fabric is healthy; otherwise the
node is read as in no clique (it falls back to the next level, its leaf) and the reason is kept
for ``GET /v1/domains`` and the log:

* a malformed value (not ``<UUID>.<unsigned integer>``);
* a tray whose fabric is degraded or down (``topos.io/gpu.fabric``: ``degraded`` | ``down``);
* a tray that reports a clique no other node does, while its leaf holds racks of several trays
  (its rack-mates report theirs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from common.labels import GFD_GPU_CLIQUE
from coordinator.core.domains.capacity import NodeState
from coordinator.core.snapshot.cliquelabel import FABRIC_BAD, FABRIC_LABEL, clique_problem

#: GFD's label (and the default ``DomainKeys.clique``).
CLIQUE_LABEL: Final = GFD_GPU_CLIQUE


@dataclass(frozen=True, slots=True)
class CliqueReading:
    """Which trusted clique each node is in, and why some nodes are in none."""

    clique_of: Mapping[str, str]
    problems: Mapping[str, str]  # node name → why its clique label is not used


def read_cliques(nodes: Iterable[NodeState], key: str, leaf_of: Mapping[str, str]) -> CliqueReading:
    """The trusted clique of every node (``key`` empty: none)."""
    clique_of: dict[str, str] = {}
    problems: dict[str, str] = {}
    if not key:
        return CliqueReading(clique_of, problems)
    for node in nodes:
        value = node.labels.get(key)
        if not value:
            continue
        bad = clique_problem(key, value)
        if bad is not None:
            problems[node.name] = f"{bad}: placed as in no clique"
            continue
        fabric = node.labels.get(FABRIC_LABEL, "")
        if fabric in FABRIC_BAD:
            problems[node.name] = (
                f"NVLink fabric {fabric} ({FABRIC_LABEL}={fabric}): out of clique {value}"
            )
            continue
        clique_of[node.name] = value
    _odd_trays(clique_of, problems, leaf_of)
    return CliqueReading(clique_of, problems)


def _odd_trays(
    clique_of: dict[str, str], problems: dict[str, str], leaf_of: Mapping[str, str]
) -> None:
    """Drop a tray that is the only node of its clique in the whole cluster while its leaf's
    other clique nodes are racks of two or more: a half-registered tray, not a one-tray rack."""
    members: dict[str, list[str]] = {}
    for node, clique in clique_of.items():
        members.setdefault(clique, []).append(node)
    by_leaf: dict[str, dict[str, int]] = {}
    for node, clique in clique_of.items():
        leaf = leaf_of.get(node)
        if leaf is not None:
            counts = by_leaf.setdefault(leaf, {})
            counts[clique] = counts.get(clique, 0) + 1
    for clique, nodes in members.items():
        leaf = leaf_of.get(nodes[0])
        if len(nodes) != 1 or leaf is None:
            continue
        mates = {c: k for c, k in by_leaf[leaf].items() if c != clique and k >= 2}
        if not mates:
            continue
        node = nodes[0]
        usual = max(sorted(mates), key=lambda c: mates[c])
        del clique_of[node]
        problems[node] = (
            f"reports clique {clique}, its rack-mates in leaf {leaf} report {usual}: "
            "placed as in no clique"
        )


__all__ = [
    "CLIQUE_LABEL",
    "FABRIC_BAD",
    "FABRIC_LABEL",
    "CliqueReading",
    "clique_problem",
    "read_cliques",
]
