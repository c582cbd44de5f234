"""One full discovery: NVML (real ``pynvml`` or the fake) + sysfs → ``NodeTopology``.

The reader only calls functions of the ``nvml`` object it is given, by their ``pynvml`` names, so
the same code runs against the real library and ``FakeNvml``. It blocks; async callers run it
with ``asyncio.to_thread``. Any NVML call the hardware refuses (NotSupported, NoPermission,
Unknown, a function the driver lacks, …) makes that one field ``None``; a GPU answering
GPU_IS_LOST is reported ``healthy=False`` with the reason. A link cell NVML cannot classify falls
back to the sysfs PCI tree, and to ``SYS`` (the most distant class) when that is unknown too.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from agent.devices.mig_catalog import ci_profile_name
from agent.devices.sysfs import Sysfs, psutil_numa_fallback, sysfs_bdf
from common.model import Gpu, MigInstance, MigProfileCapacity, NodeTopology, NumaNode

log = logging.getLogger(__name__)

_CPU_WORDS_MIN: Final = 16  # affinity bitmask words (64 CPUs each) asked of NVML
_NODE_WORDS: Final = 4


class DiscoveryError(RuntimeError):
    """Discovery could not even start (NVML would not list its GPUs)."""


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return str(value)


def _norm_bus(bus: Any) -> str:
    """``0000:07:00.0`` / ``00000000:07:00.0`` / bytes → ``00000000:07:00.0``."""
    text = _text(bus).strip()
    domain, _, rest = text.partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}"
    except ValueError:
        return text.upper()


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


@dataclass
class _Probe:
    """Calls NVML for one GPU, remembering whether it answered GPU_IS_LOST."""

    nvml: Any
    lost: bool = False
    errors: list[str] = field(default_factory=list)

    def __call__(self, function: str, *args: Any) -> Any:
        fn: Callable[..., Any] | None = getattr(self.nvml, function, None)
        if fn is None:
            self.errors.append(f"{function}: not in this NVML binding")
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if isinstance(exc, self.nvml.NVMLError_GpuIsLost):
                self.lost = True
            self.errors.append(f"{function}: {exc}")
            return None

    def raising(self, function: str, *args: Any) -> Any:
        """Like a call, but lets the NVMLError through (for callers that branch on it)."""
        fn: Callable[..., Any] | None = getattr(self.nvml, function, None)
        if fn is None:
            raise self.nvml.NVMLError(self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if isinstance(exc, self.nvml.NVMLError_GpuIsLost):
                self.lost = True
            raise


_LEVEL_CELLS: Final = (  # NVML_TOPOLOGY_* attribute → matrix cell
    ("NVML_TOPOLOGY_INTERNAL", "PIX"),
    ("NVML_TOPOLOGY_SINGLE", "PIX"),
    ("NVML_TOPOLOGY_MULTIPLE", "PXB"),
    ("NVML_TOPOLOGY_HOSTBRIDGE", "PHB"),
    ("NVML_TOPOLOGY_NODE", "NODE"),
    ("NVML_TOPOLOGY_SYSTEM", "SYS"),
)


def read_topology(
    nvml: Any,
    *,
    sysfs: Sysfs,
    hostname: str,
    source: str = "nvml",
    host_fallback: bool = True,
) -> NodeTopology:
    """Discover the node. ``nvml`` must be initialised (``nvmlInit``) by the caller.

    ``host_fallback``: when sysfs has no NUMA data, describe this host from psutil (real nodes);
    off for simulated nodes, whose facts must come from their profile only.
    """
    sysfs.forget()
    top = _Probe(nvml)
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
    probes: list[_Probe] = []
    gpus: list[Gpu] = []
    for index in range(count):
        probe = _Probe(nvml)
        handle = probe("nvmlDeviceGetHandleByIndex", index)
        handles.append(handle)
        probes.append(probe)
        gpus.append(_read_gpu(nvml, probe, handle, index, hostname, sysfs, cpu_words, numa_nodes))

    buses = [g.pci_bus_id for g in gpus]
    links = _link_matrix(nvml, handles, probes, buses, sysfs)
    nvswitch = links.nvswitch
    # A GPU can be lost half-way through (the NVLink or topology queries): report it.
    gpus = [_mark_lost(g) if (probes[i].lost and g.healthy) else g for i, g in enumerate(gpus)]

    nics = sysfs.rdma_nics()
    nic_links: tuple[tuple[str, ...], ...] = ()
    nic_nic: tuple[tuple[str, ...], ...] = ()
    if nics:
        nic_bdfs = [None if n.pci_bus_id is None else sysfs_bdf(n.pci_bus_id) for n in nics]
        gpu_bdfs = [None if b is None else sysfs_bdf(b) for b in buses]
        nic_links = tuple(tuple(_pci_cell(sysfs, g, k) for k in nic_bdfs) for g in gpu_bdfs)
        nic_nic = tuple(
            tuple(
                "X" if a == b else _pci_cell(sysfs, nic_bdfs[a], nic_bdfs[b])
                for b in range(len(nics))
            )
            for a in range(len(nics))
        )

    return NodeTopology(
        hostname=hostname,
        driver_version=None if driver is None else _text(driver),
        cuda_version=cuda,
        gpus=tuple(gpus),
        links=links.cells,
        nvswitch=nvswitch,
        nics=tuple(nics),
        nic_links=nic_links if gpus else (),
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


def _pci_cell(sysfs: Sysfs, a: str | None, b: str | None) -> str:
    if a is None or b is None:
        return "SYS"
    return sysfs.pci_relation(a, b) or "SYS"


def _read_gpu(
    nvml: Any,
    probe: _Probe,
    handle: Any,
    index: int,
    hostname: str,
    sysfs: Sysfs,
    cpu_words: int,
    numa_nodes: tuple[NumaNode, ...],
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
    bus = None if pci is None else _norm_bus(pci.busId)
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
    mig_capable, mig_enabled, instances, creatable = _read_mig(nvml, probe, handle)

    def as_int(value: Any) -> int | None:
        return None if value is None else int(value)

    gpu = Gpu(
        index=index,
        uuid=_text(uuid) if uuid is not None else f"unknown:{hostname}:gpu{index}",
        product=None if name is None else _text(name),
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


def _read_mig(
    nvml: Any, probe: _Probe, handle: Any
) -> tuple[bool | None, bool | None, tuple[MigInstance, ...], tuple[MigProfileCapacity, ...]]:
    try:
        mode = probe.raising("nvmlDeviceGetMigMode", handle)
    except nvml.NVMLError_NotSupported:
        return False, False, (), ()
    except nvml.NVMLError as exc:
        probe.errors.append(f"nvmlDeviceGetMigMode: {exc}")
        return None, None, (), ()
    enabled = int(mode[0]) == int(nvml.NVML_DEVICE_MIG_ENABLE)
    if not enabled:
        return True, False, (), ()

    uuids = _mig_uuids(nvml, probe, handle)
    instances: list[MigInstance] = []
    creatable: list[MigProfileCapacity] = []
    for index in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = probe.raising("nvmlDeviceGetGpuInstanceProfileInfo", handle, index)
        except nvml.NVMLError_FunctionNotFound:
            info = probe("nvmlDeviceGetGpuInstanceProfileInfo", handle, index, 1)
        except nvml.NVMLError:
            continue  # this part has no such profile
        if info is None:
            continue
        gi_name = _profile_name(info)
        free = probe("nvmlDeviceGetGpuInstanceRemainingCapacity", handle, info.id)
        if free is not None:
            creatable.append(
                MigProfileCapacity(
                    profile=gi_name,
                    free=int(free),
                    total=int(info.instanceCount),
                    memory_mib=int(info.memorySizeMB),
                    slices=int(info.sliceCount),
                )
            )
        if int(info.instanceCount) == 0:
            continue
        gi_array = (nvml.c_nvmlGpuInstance_t * int(info.instanceCount))()
        gi_count = ctypes.c_uint(0)
        if (
            probe("nvmlDeviceGetGpuInstances", handle, info.id, gi_array, ctypes.byref(gi_count))
            is None
        ):
            continue
        for gi in list(gi_array)[: gi_count.value]:
            gi_info = probe("nvmlGpuInstanceGetInfo", gi)
            if gi_info is None:
                continue
            instances += _read_cis(nvml, probe, gi, gi_info, gi_name, info, uuids)
    instances.sort(key=lambda m: (m.gi_id, -1 if m.ci_id is None else m.ci_id))
    return True, True, tuple(instances), tuple(creatable)


def _read_cis(
    nvml: Any,
    probe: _Probe,
    gi: Any,
    gi_info: Any,
    gi_name: str,
    gi_profile: Any,
    uuids: dict[tuple[int, int], str],
) -> list[MigInstance]:
    gi_id = int(gi_info.id)
    start = int(gi_info.placement.start)
    size = int(gi_info.placement.size)
    memory = int(gi_profile.memorySizeMB)
    gi_slices = int(gi_profile.sliceCount)
    found: list[MigInstance] = []
    engine = int(getattr(nvml, "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", 0))
    for index in range(int(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
        try:
            ci_profile = probe.raising(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, index, engine
            )
        except nvml.NVMLError_FunctionNotFound:  # drivers before the V call: ask version 1
            ci_profile = probe("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, index, engine, 1)
        except nvml.NVMLError:
            continue  # no such split for this GPU instance
        if ci_profile is None:
            continue
        if int(ci_profile.instanceCount) == 0:
            continue
        ci_array = (nvml.c_nvmlComputeInstance_t * int(ci_profile.instanceCount))()
        ci_count = ctypes.c_uint(0)
        got = probe(
            "nvmlGpuInstanceGetComputeInstances",
            gi,
            ci_profile.id,
            ci_array,
            ctypes.byref(ci_count),
        )
        if got is None:
            continue
        for ci in list(ci_array)[: ci_count.value]:
            ci_info = probe("nvmlComputeInstanceGetInfo", ci)
            if ci_info is None:
                continue
            ci_id = int(ci_info.id)
            slices = int(ci_profile.sliceCount)
            found.append(
                MigInstance(
                    profile=ci_profile_name(gi_name, slices, gi_slices),
                    gi_id=gi_id,
                    ci_id=ci_id,
                    placement_start=start,
                    placement_size=size,
                    memory_mib=memory,
                    slices=slices,
                    uuid=uuids.get((gi_id, ci_id)),
                )
            )
    if not found:  # a GPU instance without compute instances
        found.append(
            MigInstance(
                profile=gi_name,
                gi_id=gi_id,
                placement_start=start,
                placement_size=size,
                memory_mib=memory,
                slices=gi_slices,
            )
        )
    return found


def _mig_uuids(nvml: Any, probe: _Probe, handle: Any) -> dict[tuple[int, int], str]:
    """(GPU instance, compute instance) → ``MIG-…`` UUID, from the MIG device handles."""
    out: dict[tuple[int, int], str] = {}
    count = probe("nvmlDeviceGetMaxMigDeviceCount", handle)
    for i in range(int(count or 0)):
        try:
            mig = probe.raising("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        except nvml.NVMLError:
            continue  # NOT_FOUND: no MIG device at this index
        gi = probe("nvmlDeviceGetGpuInstanceId", mig)
        ci = probe("nvmlDeviceGetComputeInstanceId", mig)
        uuid = probe("nvmlDeviceGetUUID", mig)
        if gi is not None and ci is not None and uuid is not None:
            out[(int(gi), int(ci))] = _text(uuid)
    return out


def _profile_name(info: Any) -> str:
    name = _text(getattr(info, "name", b"")).strip()
    if name.startswith("MIG "):
        name = name[4:]
    if name:
        return name
    gib = math.ceil(int(info.memorySizeMB) / 1024)
    return f"{int(info.sliceCount)}g.{gib}gb"


@dataclass(frozen=True)
class _Links:
    cells: tuple[tuple[str, ...], ...]
    nvswitch: bool


def _link_matrix(
    nvml: Any, handles: list[Any], probes: list[_Probe], buses: list[str | None], sysfs: Sysfs
) -> _Links:
    n = len(handles)
    index_of = {bus: i for i, bus in enumerate(buses) if bus is not None}
    direct: list[Counter[int]] = [Counter() for _ in range(n)]
    switch_ports = [0] * n
    switches: list[set[str]] = [set() for _ in range(n)]
    switch_type = int(getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2))
    gpu_type = int(getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0))
    enabled = int(getattr(nvml, "NVML_FEATURE_ENABLED", 1))
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    for i, handle in enumerate(handles):
        if handle is None:
            continue
        probe = probes[i]
        for link in range(max_links):
            try:
                state = probe.raising("nvmlDeviceGetNvLinkState", handle, link)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                break  # a PCIe-only GPU, or past its last NVLink port
            except nvml.NVMLError_GpuIsLost:
                break
            except nvml.NVMLError:
                continue  # this one port would not answer
            if int(state) != enabled:
                continue
            remote = probe("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            if remote is None:
                continue
            remote_bus = _norm_bus(remote.busId)
            kind = probe("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if kind is not None and int(kind) == switch_type:
                switch_ports[i] += 1
                switches[i].add(remote_bus)
            elif remote_bus in index_of and (kind is None or int(kind) == gpu_type):
                direct[i][index_of[remote_bus]] += 1
            elif kind is None and remote_bus not in index_of:
                # Older drivers cannot name the remote type: a non-GPU peer is an NVSwitch.
                switch_ports[i] += 1
                switches[i].add(remote_bus)

    levels = {int(getattr(nvml, attr)): cell for attr, cell in _LEVEL_CELLS if hasattr(nvml, attr)}
    rows = [["X"] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            count = max(direct[i][j], direct[j][i])
            if count:
                cell = f"NV{count}"
            elif switch_ports[i] and switch_ports[j] and switches[i] & switches[j]:
                cell = f"NV{min(switch_ports[i], switch_ports[j])}"
            else:
                cell = _pcie_cell(
                    nvml, probes[i], handles[i], handles[j], buses[i], buses[j], levels, sysfs
                )
            rows[i][j] = rows[j][i] = cell
    return _Links(tuple(tuple(r) for r in rows), nvswitch=any(switch_ports))


def _pcie_cell(
    nvml: Any,
    probe: _Probe,
    a: Any,
    b: Any,
    bus_a: str | None,
    bus_b: str | None,
    levels: dict[int, str],
    sysfs: Sysfs,
) -> str:
    del probe  # a lost *peer* must not mark this GPU lost: ask through a throwaway probe
    if a is not None and b is not None:
        level = _Probe(nvml)("nvmlDeviceGetTopologyCommonAncestor", a, b)
        if level is not None and int(level) in levels:
            return levels[int(level)]
    if bus_a is not None and bus_b is not None:
        return sysfs.pci_relation(sysfs_bdf(bus_a), sysfs_bdf(bus_b)) or "SYS"
    return "SYS"
