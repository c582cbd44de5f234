"""``topos.io/numa.count``."""

from __future__ import annotations

from common import labels as L
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology


def numa(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.number(L.NUMA_COUNT, len(topology.numa_nodes) or None)
    return b.build()
