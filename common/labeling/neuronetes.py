"""NeuroNetes compatible labels (``neuronetes.io/*``, seed 000).

``gpu-type`` is the short model name NeuroNetes users write (``A100``, ``H100``, ``L40S``,
``RTX-4090``); ``gpu-memory`` the smallest GPU's size class (:mod:`common.gpumemory`: ``80Gi`` for
an H100 reporting 81,559 MiB); ``gpu-topology`` uses
NeuroNetes' locality words, so an NVSwitch node is ``nvlink`` (every pair is NVLink-joined);
``mig-config`` lists existing MIG instances as ``profile:count`` pairs, which is not a legal
label value and therefore lands in an annotation of the same name.
"""

from __future__ import annotations

import re

from common import gpumemory
from common import labels as L
from common.labeling import facts
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology, topology_class

_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce", "quadro"})
_SPLIT_RE = re.compile(r"[\s\-_/]+")


def gpu_type(product: str | None) -> str | None:
    """``NVIDIA A100-SXM4-40GB`` → ``A100``; ``NVIDIA GeForce RTX 4090`` → ``RTX-4090``."""
    if product is None:
        return None
    tokens = [t for t in _SPLIT_RE.split(product.strip()) if t]
    tokens = [t for t in tokens if t.lower() not in _VENDOR_WORDS]
    for i, token in enumerate(tokens):
        if any(c.isdigit() for c in token):
            if token.isdigit() and i > 0:  # "RTX 4090": the number needs its series
                return f"{tokens[i - 1]}-{token}"
            return token
    return tokens[0] if tokens else None


def neuronetes(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.text(L.NEURONETES_GPU_TYPE, gpu_type(facts.product(topology)))
    mib = facts.smallest_memory_mib(topology)
    b.exact(L.NEURONETES_GPU_MEMORY, None if mib is None else f"{gpumemory.class_gib(mib)}Gi")
    b.number(L.NEURONETES_GPU_COUNT, len(topology.gpus))
    cls = topology_class(topology) if topology.gpus else None
    b.exact(L.NEURONETES_GPU_TOPOLOGY, "nvlink" if cls == "nvswitch" else cls)
    b.flag(L.NEURONETES_MIG_CAPABLE, facts.mig_capable(topology))
    layout = facts.mig_layout(topology)
    if layout is not None:
        b.exact(L.NEURONETES_MIG_CONFIG, layout)
    return b.build()
