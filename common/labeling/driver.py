"""``topos.io/driver.version`` and ``topos.io/cuda.version``."""

from __future__ import annotations

from common import labels as L
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology


def driver(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.text(L.DRIVER_VERSION, topology.driver_version)
    b.text(L.CUDA_VERSION, topology.cuda_version)
    return b.build()
