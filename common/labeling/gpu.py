"""``topos.io/gpu.product``, ``gpu.count``, ``gpu.memory``, ``gpu.family``: one labeler each."""

from __future__ import annotations

from common import labels as L
from common.labeling import facts
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology, gpu_family


def product(topology: NodeTopology) -> NodeLabels:
    """The product name, sanitised (``NVIDIA-A100-SXM4-40GB``); ``mixed`` for a node with
    different products; ``unknown`` when NVML could not say."""
    b = LabelBuilder()
    names = {gpu.product for gpu in topology.gpus}
    if len(names) > 1 and None not in names:
        b.text(L.GPU_PRODUCT, "mixed")
    else:
        b.text(L.GPU_PRODUCT, facts.product(topology))
    return b.build()


def count(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.number(L.GPU_COUNT, len(topology.gpus))
    return b.build()


def memory(topology: NodeTopology) -> NodeLabels:
    """MiB of the smallest GPU (a selector ``gpu.memory>=…`` must hold for every GPU)."""
    b = LabelBuilder()
    b.number(L.GPU_MEMORY, facts.smallest_memory_mib(topology))
    return b.build()


def family(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.exact(L.GPU_FAMILY, gpu_family(facts.compute_capability(topology)))
    return b.build()
