"""KubeNexus compatible NUMA labels (``numa.kubenexus.io/*``, seed 002).

``node-count`` is the number of NUMA nodes; ``node-<i>-cpus`` the kernel CPU list of NUMA node
*i* and ``node-<i>-memory`` its memory as a quantity. A CPU list with a comma (``0-15,32-47``) is
not a legal label value, so it is written as an annotation of the same name; a single range
(``0-63``) stays a label.
"""

from __future__ import annotations

from common import labels as L
from common.labeling import facts
from common.labels import LabelBuilder, NodeLabels
from common.model import NodeTopology, format_cpulist


def kubenexus(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    b.number(L.KUBENEXUS_NODE_COUNT, len(topology.numa_nodes) or None)
    for node in topology.numa_nodes:
        b.exact(L.kubenexus_cpus_key(node.id), format_cpulist(node.cpus) or None)
        mem = node.memory_mib
        b.exact(
            L.kubenexus_memory_key(node.id), None if mem is None else facts.memory_quantity(mem)
        )
    return b.build()
