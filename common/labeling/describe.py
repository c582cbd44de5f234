"""Annotations for programs and people: the full model as JSON, and readable summaries.

``topos.io/topology`` is the compact JSON of ``common.model.NodeTopology`` minus what changes by
itself from one discovery to the next (free memory, the health counters: they travel in the
stream and the ``ToposGPUHealthy`` condition), so a steady node yields a byte-identical
annotation and no patch. If the JSON would exceed ``TOPOLOGY_ANNOTATION_MAX_BYTES`` the bulky
optional parts (creatable MIG profiles, the NIC matrix) are dropped; if it still does not fit it is
left out and ``topos.io/summary`` says so.
"""

from __future__ import annotations

import msgspec

from common import labels as L
from common.labeling import facts
from common.labels import LabelBuilder, NodeLabels
from common.model import Gpu, NodeTopology, format_cpulist, topology_class, topology_to_json


def stable_topology(topology: NodeTopology) -> NodeTopology:
    """The snapshot without fields that drift while nothing changes (free memory, health)."""
    gpus = tuple(
        msgspec.structs.replace(gpu, memory_free_mib=None, health=None) for gpu in topology.gpus
    )
    return msgspec.structs.replace(topology, gpus=gpus)


def topology_json(topology: NodeTopology, *, limit: int) -> str | None:
    """Compact JSON within ``limit`` bytes, trimming optional bulk first; ``None`` if too big."""
    stable = stable_topology(topology)
    data = topology_to_json(stable)
    if len(data) <= limit:
        return data.decode()
    slim = msgspec.structs.replace(
        stable,
        gpus=tuple(msgspec.structs.replace(g, mig_creatable=()) for g in stable.gpus),
        nic_links=(),
        nics=(),
    )
    data = topology_to_json(slim)
    return data.decode() if len(data) <= limit else None


def summary_line(topology: NodeTopology) -> str:
    """``8x NVIDIA A100-SXM4-40GB (40960 MiB), nvswitch, 2 NUMA nodes, …``."""
    n = len(topology.gpus)
    if n == 0:
        gpus = "no GPUs"
    else:
        names = sorted({gpu.product or "unknown GPU" for gpu in topology.gpus})
        mem = facts.smallest_memory_mib(topology)
        gpus = f"{n}x {' + '.join(names)}" + (f" ({mem} MiB)" if mem is not None else "")
    parts = [gpus]
    if n:
        parts.append(topology_class(topology))
    if topology.numa_nodes:
        k = len(topology.numa_nodes)
        parts.append(f"{k} NUMA node{'s' if k != 1 else ''}")
    parts.append(f"driver {topology.driver_version or 'unknown'}")
    parts.append(f"CUDA {topology.cuda_version or 'unknown'}")
    parts.append(f"{facts.healthy_count(topology)}/{n} healthy")
    layout = facts.mig_layout(topology)
    if layout is not None:
        parts.append(f"MIG {layout}")
    elif facts.mig_enabled(topology):
        parts.append("MIG enabled, no instances")
    return ", ".join(parts)


def gpu_line(gpu: Gpu) -> str:
    """``GPU0 NVIDIA A100-SXM4-40GB 40960MiB cc8.0 NUMA0 CPUs0-63 00000000:07:00.0 healthy``."""
    parts = [f"GPU{gpu.index}", gpu.product or "unknown"]
    if gpu.memory_total_mib is not None:
        parts.append(f"{gpu.memory_total_mib}MiB")
    if gpu.compute_capability:
        parts.append(f"cc{gpu.compute_capability}")
    if gpu.numa_node is not None:
        parts.append(f"NUMA{gpu.numa_node}")
    if gpu.cpu_affinity:
        parts.append(f"CPUs{format_cpulist(gpu.cpu_affinity)}")
    if gpu.pci_bus_id:
        parts.append(gpu.pci_bus_id)
    if gpu.mig_enabled:
        profiles = ",".join(inst.profile for inst in gpu.mig_instances) or "none"
        parts.append(f"MIG[{profiles}]")
    parts.append("healthy" if gpu.healthy else f"UNHEALTHY ({gpu.health_reason or 'unknown'})")
    return " ".join(parts)


def describe(topology: NodeTopology) -> NodeLabels:
    b = LabelBuilder()
    encoded = topology_json(topology, limit=L.TOPOLOGY_ANNOTATION_MAX_BYTES)
    summary = summary_line(topology)
    if encoded is None:
        summary += " (topology too large for the annotation; see the coordinator's /v1/nodes)"
    else:
        b.annotation(L.TOPOLOGY, encoded)
    b.annotation(L.SUMMARY, summary)
    if topology.gpus:
        b.annotation(L.GPUS, "\n".join(gpu_line(gpu) for gpu in topology.gpus))
    return b.build()
