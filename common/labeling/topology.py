"""``topos.io/gpu.topology``: ``nvswitch`` | ``nvlink`` | ``pcie`` for the whole node."""

from __future__ import annotations

from common import labels as L
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology, topology_class


def link_class(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.exact(L.GPU_TOPOLOGY, topology_class(topology) if topology.gpus else None)
    return b.build()
