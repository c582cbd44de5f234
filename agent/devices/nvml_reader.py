"""One full discovery: NVML (real ``pynvml`` or the fake) + sysfs → ``NodeTopology``.

The reader only calls functions of the ``nvml`` object it is given, by their ``pynvml`` names, so
the same code runs against the real library and ``FakeNvml``. It blocks; async callers run it
with ``asyncio.to_thread``. Any NVML call the hardware refuses (NotSupported, NoPermission,
Unknown, a function the driver lacks, …) makes that one field ``None``; a GPU answering
GPU_IS_LOST is reported ``healthy=False`` with the reason. A link cell NVML cannot classify falls
back to the sysfs PCI tree, and to ``SYS`` (the most distant class) when that is unknown too.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Final

import msgspec

from agent.devices.nvml_health import read_health
from agent.devices.nvml_links import link_matrix, nic_matrices
from agent.devices.nvml_mig import read_mig
from agent.devices.nvml_probe import Probe, as_text, norm_bus
from agent.devices.sysfs import Sysfs, psutil_numa_fallback, sysfs_bdf
from common.model import Gpu, NodeTopology

log = logging.getLogger(__name__)

_CPU_WORDS_MIN: Final = 16  # affinity bitmask words (64 CPUs each) asked of NVML
_NODE_WORDS: Final = 4


class DiscoveryError(RuntimeError):
    """Discovery could not even start (NVML would not list its GPUs)."""


def _bits(mask: Any) -> tuple[int, ...]:
    out: list[int] = []
    for word_index, word in enumerate(mask):
        word = int(word)
        bit = 0
        while word:
            if word & 1:
                out.append(word_index * 64 + bit)
            word >>= 1
            bit += 1
    return tuple(out)


def read_topology(
    nvml: Any,
    *,
    sysfs: Sysfs,
    hostname: str,
    source: str = "nvml",
    host_fallback: bool = True,
    health: bool = True,
) -> NodeTopology:
    """Discover the node. ``nvml`` must be initialised (``nvmlInit``) by the caller.

    ``host_fallback``: when sysfs has no NUMA data, describe this host from psutil (real nodes);
    off for simulated nodes, whose facts must come from their profile only. ``health``: read
    each GPU's health counters too (``agent.devices.nvml_health``).
    """
    sysfs.forget()
    top = Probe(nvml)
    driver = top("nvmlSystemGetDriverVersion")
    cuda_raw = top("nvmlSystemGetCudaDriverVersion")
    cuda = None if cuda_raw is None else f"{int(cuda_raw) // 1000}.{int(cuda_raw) % 1000 // 10}"
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        raise DiscoveryError(f"NVML could not count the GPUs: {exc}") from None

    numa_nodes = sysfs.numa_nodes()
    cpu_count = sysfs.cpu_count()
    memory_mib = sysfs.memory_mib()
    if numa_nodes is None:
        if host_fallback:
            numa_nodes, psutil_cpus, psutil_mem = psutil_numa_fallback()
            cpu_count = cpu_count or psutil_cpus
            memory_mib = memory_mib or psutil_mem
        else:
            numa_nodes = ()
    if cpu_count is None and numa_nodes:
        cpu_count = len({c for node in numa_nodes for c in node.cpus}) or None
    if memory_mib is None and numa_nodes and all(n.memory_mib is not None for n in numa_nodes):
        memory_mib = sum(n.memory_mib or 0 for n in numa_nodes)
    cpu_words = max(_CPU_WORDS_MIN, math.ceil((cpu_count or 0) / 64))

    handles: list[Any] = []
    probes: list[Probe] = []
    gpus: list[Gpu] = []
    for index in range(count):
        probe = Probe(nvml)
        handle = probe("nvmlDeviceGetHandleByIndex", index)
        handles.append(handle)
        probes.append(probe)
        gpus.append(_read_gpu(nvml, probe, handle, index, hostname, sysfs, cpu_words))

    buses = [g.pci_bus_id for g in gpus]
    links = link_matrix(nvml, handles, probes, buses, sysfs)
    if health:
        gpus = [
            msgspec.structs.replace(
                g, health=read_health(nvml, probes[i], handles[i], links.ports[i])
            )
            if handles[i] is not None and not probes[i].lost
            else g
            for i, g in enumerate(gpus)
        ]
    # A GPU can be lost half-way through (the NVLink or topology queries): report it.
    gpus = [_mark_lost(g) if (probes[i].lost and g.healthy) else g for i, g in enumerate(gpus)]

    nics = sysfs.rdma_nics()
    nic_links, nic_nic = nic_matrices(sysfs, nics, buses)
    return NodeTopology(
        hostname=hostname,
        driver_version=None if driver is None else as_text(driver),
        cuda_version=cuda,
        gpus=tuple(gpus),
        links=links.cells,
        nvswitch=links.nvswitch,
        nics=tuple(nics),
        nic_links=nic_links,
        nic_nic_links=nic_nic,
        numa_nodes=tuple(numa_nodes),
        cpu_count=cpu_count,
        memory_mib=memory_mib,
        source=source,
    )


def _mark_lost(gpu: Gpu) -> Gpu:
    return msgspec.structs.replace(
        gpu, healthy=False, health_reason="GPU is lost (NVML: GPU_IS_LOST); reset or reboot needed"
    )


def _read_gpu(
    nvml: Any,
    probe: Probe,
    handle: Any,
    index: int,
    hostname: str,
    sysfs: Sysfs,
    cpu_words: int,
) -> Gpu:
    if handle is None:
        return Gpu(
            index=index,
            uuid=f"unknown:{hostname}:gpu{index}",
            healthy=False,
            health_reason=f"NVML gives no handle for GPU {index}: {'; '.join(probe.errors)}",
        )
    uuid = probe("nvmlDeviceGetUUID", handle)
    name = probe("nvmlDeviceGetName", handle)
    mem = probe("nvmlDeviceGetMemoryInfo", handle)
    cc = probe("nvmlDeviceGetCudaComputeCapability", handle)
    pci = probe("nvmlDeviceGetPciInfo", handle)
    bus = None if pci is None else norm_bus(pci.busId)
    power = probe("nvmlDeviceGetPowerManagementLimit", handle)
    cpu_mask = probe("nvmlDeviceGetCpuAffinity", handle, cpu_words)
    node_mask = probe(
        "nvmlDeviceGetMemoryAffinity",
        handle,
        _NODE_WORDS,
        getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0),
    )
    memory_numa = probe("nvmlDeviceGetNumaNodeId", handle)
    numa_affinity = None if node_mask is None else _bits(node_mask)
    numa_node: int | None = numa_affinity[0] if numa_affinity else None
    if numa_node is None and bus is not None:
        numa_node = sysfs.pci_numa_node(sysfs_bdf(bus))
    mig_capable, mig_enabled, instances, creatable = read_mig(nvml, probe, handle)

    def as_int(value: Any) -> int | None:
        return None if value is None else int(value)

    gpu = Gpu(
        index=index,
        uuid=as_text(uuid) if uuid is not None else f"unknown:{hostname}:gpu{index}",
        product=None if name is None else as_text(name),
        memory_total_mib=None if mem is None else int(mem.total) >> 20,
        memory_free_mib=None if mem is None else int(mem.free) >> 20,
        compute_capability=None if cc is None else f"{int(cc[0])}.{int(cc[1])}",
        pci_bus_id=bus,
        numa_node=numa_node,
        cpu_affinity=None if cpu_mask is None else _bits(cpu_mask),
        pcie_gen_max=as_int(probe("nvmlDeviceGetMaxPcieLinkGeneration", handle)),
        pcie_width_max=as_int(probe("nvmlDeviceGetMaxPcieLinkWidth", handle)),
        pcie_gen_current=as_int(probe("nvmlDeviceGetCurrPcieLinkGeneration", handle)),
        pcie_width_current=as_int(probe("nvmlDeviceGetCurrPcieLinkWidth", handle)),
        power_limit_w=None if power is None else int(power) / 1000.0,
        mig_capable=mig_capable,
        mig_enabled=mig_enabled,
        mig_instances=instances,
        mig_creatable=creatable,
        numa_affinity=numa_affinity,
        memory_numa_node=None if memory_numa is None or int(memory_numa) < 0 else int(memory_numa),
    )
    if probe.errors:
        log.debug("GPU %d: NVML refused: %s", index, "; ".join(probe.errors))
    return _mark_lost(gpu) if probe.lost else gpu
