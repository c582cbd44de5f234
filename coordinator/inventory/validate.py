"""Whether an agent's report could describe a real node.

The wire schema (:mod:`common.wire`) checks shapes and types; this module checks what only the
report as a whole can show: every GPU and MIG device has a UUID and no two share one, memory
figures are possible (never negative, free never above total), CPU ids are within the node's
CPUs, every reference names something the report has (a GPU's or NIC's NUMA node; NUMA ids and
NIC names unique, a CPU in one NUMA node), NIC link matrices are square and made of links, and
MIG instances are possible (GPU/compute-instance ids unique per GPU, placements and counts not
negative), health readings are possible (counters not negative, NVLink ports real and unique).
Allocations naming GPUs the node did not report are *not* refused — they are what the
kubelet really handed out — but listed by :func:`unknown_holdings`. A failed check raises
:class:`~common.wire.FrameError` (``invalid-state``) naming the first problem; the stream is closed
with it and nothing of the report is kept. Uniqueness *across* nodes needs the whole inventory and
is checked there (:meth:`coordinator.inventory.store.Inventory.apply_hello`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from common.model import Link, ModelError, NodeTopology, format_cpulist
from common.wire import CloseReason, ContainerAllocation, FrameError
from coordinator.inventory.mismatch import device_uuid

__all__ = ["check_report", "device_ids", "unknown_holdings", "warn_unknown_holdings"]

log = logging.getLogger(__name__)

_GPU: Final = "nvidia.com/gpu"
_MIG_PREFIX: Final = "nvidia.com/mig-"


def _bad(detail: str) -> FrameError:
    return FrameError(CloseReason.INVALID_STATE, detail)


def device_ids(topology: NodeTopology) -> frozenset[str]:
    """The UUIDs of every GPU and every MIG device (with a UUID) the report names."""
    ids = {gpu.uuid for gpu in topology.gpus}
    ids.update(inst.uuid for gpu in topology.gpus for inst in gpu.mig_instances if inst.uuid)
    return frozenset(ids)


def _check_devices(topology: NodeTopology) -> None:
    seen: dict[str, str] = {}
    for gpu in topology.gpus:
        names = [(f"GPU {gpu.index}", gpu.uuid)]
        names += [
            (f"MIG gi{inst.gi_id} of GPU {gpu.index}", inst.uuid)
            for inst in gpu.mig_instances
            if inst.uuid is not None
        ]
        for what, uuid in names:
            if not uuid.strip():
                raise _bad(f"{what} has an empty UUID")
            if uuid in seen:
                raise _bad(f"{what} and {seen[uuid]} share UUID {uuid[:40]}")
            seen[uuid] = what


def _check_memory(topology: NodeTopology) -> None:
    if topology.memory_mib is not None and topology.memory_mib < 0:
        raise _bad(f"node memory_mib {topology.memory_mib} is negative")
    for numa in topology.numa_nodes:
        if numa.id < 0 or (numa.memory_mib is not None and numa.memory_mib < 0):
            raise _bad(f"NUMA node {numa.id} has a negative id or memory")
    for gpu in topology.gpus:
        total, free = gpu.memory_total_mib, gpu.memory_free_mib
        if total is not None and total < 0:
            raise _bad(f"GPU {gpu.index} memory_total_mib {total} is negative")
        if free is not None and free < 0:
            raise _bad(f"GPU {gpu.index} memory_free_mib {free} is negative")
        if total is not None and free is not None and free > total:
            raise _bad(f"GPU {gpu.index} memory_free_mib {free} exceeds its total {total}")
        for inst in gpu.mig_instances:
            if inst.memory_mib < 0:
                raise _bad(f"MIG gi{inst.gi_id} of GPU {gpu.index} has negative memory")


def _check_cpus(where: str, cpus: Iterable[int], count: int | None) -> None:
    cpus = tuple(cpus)
    if not cpus or (min(cpus) >= 0 and (count is None or max(cpus) < count)):
        return  # the common case, without a Python-level loop (224 CPUs a DGX H100, 10 lists)
    for cpu in cpus:
        if cpu < 0 or (count is not None and cpu >= count):
            limit = "" if count is None else f" (the node has {count} CPUs)"
            raise _bad(f"{where} names CPU {cpu}{limit}")


def _check_topology_cpus(topology: NodeTopology) -> None:
    count = topology.cpu_count
    if count is not None and count < 0:
        raise _bad(f"cpu_count {count} is negative")
    for gpu in topology.gpus:
        _check_cpus(f"GPU {gpu.index} cpu_affinity", gpu.cpu_affinity or (), count)
    for numa in topology.numa_nodes:
        _check_cpus(f"NUMA node {numa.id}", numa.cpus, count)


def _check_numa(topology: NodeTopology) -> None:
    """NUMA node ids unique, each CPU in one NUMA node, and every GPU and NIC on one of them."""
    ids: set[int] = set()
    cpu_home: dict[int, int] = {}
    for numa in topology.numa_nodes:
        if numa.id in ids:
            raise _bad(f"NUMA node {numa.id} is listed twice")
        ids.add(numa.id)
        if len(cpu_home) + len(numa.cpus) != len(cpu_home.keys() | set(numa.cpus)):
            cpu = next(c for c in numa.cpus if c in cpu_home)
            raise _bad(f"CPU {cpu} is in NUMA node {cpu_home[cpu]} and NUMA node {numa.id}")
        cpu_home.update(dict.fromkeys(numa.cpus, numa.id))
    where = [(f"GPU {gpu.index}", gpu.numa_node) for gpu in topology.gpus]
    where += [(f"NIC {nic.name[:40]}", nic.numa_node) for nic in topology.nics]
    for what, numa_id in where:
        if numa_id is None:
            continue
        if numa_id < 0:
            raise _bad(f"{what} numa_node {numa_id} is negative")
        if ids and numa_id not in ids:
            raise _bad(
                f"{what} numa_node {numa_id} is not a NUMA node of this node "
                f"({format_cpulist(ids)})"
            )


def _check_nics(topology: NodeTopology) -> None:
    """NIC names unique and non-empty; the NIC×NIC matrix square, its cells links."""
    names: set[str] = set()
    for nic in topology.nics:
        if not nic.name.strip():
            raise _bad("a NIC has an empty name")
        if nic.name in names:
            raise _bad(f"NIC {nic.name[:40]} is listed twice")
        names.add(nic.name)
    n = len(topology.nics)
    matrix = topology.nic_nic_links
    if matrix and (len(matrix) != n or any(len(row) != n for row in matrix)):
        raise _bad(f"nic_nic_links must be {n}x{n} for {n} NICs")
    for row in (*topology.nic_links, *matrix):
        for cell in row:
            try:
                Link.parse(cell)
            except ModelError as exc:
                raise _bad(f"NIC link {cell[:20]!r}: {exc}"[:100]) from None


def _check_mig(topology: NodeTopology) -> None:
    """Per GPU: MIG instance ids (GPU instance, compute instance) unique, placements and slices
    possible, creatable counts too."""
    for gpu in topology.gpus:
        ids: set[tuple[int, int | None]] = set()
        for inst in gpu.mig_instances:
            what = f"MIG gi{inst.gi_id} of GPU {gpu.index}"
            if (inst.gi_id, inst.ci_id) in ids:
                ci = "" if inst.ci_id is None else f" ci{inst.ci_id}"
                raise _bad(f"GPU {gpu.index} lists MIG gi{inst.gi_id}{ci} twice")
            ids.add((inst.gi_id, inst.ci_id))
            if inst.placement_start < 0 or inst.placement_size < 1 or inst.slices < 1:
                raise _bad(
                    f"{what} has placement {inst.placement_start}+{inst.placement_size}, "
                    f"{inst.slices} slices"
                )
        for cap in gpu.mig_creatable:
            if not 0 <= cap.free <= cap.total:
                raise _bad(
                    f"GPU {gpu.index} MIG profile {cap.profile[:20]}: free {cap.free} "
                    f"of total {cap.total}"
                )


_MAX_NVLINKS: Final = 64
_MAX_REASONS: Final = 64
_GPU_COUNTERS: Final = (
    "ecc_corrected",
    "ecc_uncorrected",
    "retired_pages_single_bit",
    "retired_pages_double_bit",
    "remapped_rows_corrected",
    "remapped_rows_uncorrected",
)
_PORT_COUNTERS: Final = ("crc_errors", "replay_errors", "recovery_errors")


def _check_health(topology: NodeTopology) -> None:
    """NVML health readings: counters are never negative, NVLink ports are real and listed
    once, and the verdict's reasons are bounded (docs/health.md). Every delta carries health,
    so nothing is formatted unless a check fails."""
    for gpu in topology.gpus:
        health = gpu.health
        if health is None:
            continue
        for name in _GPU_COUNTERS:
            value = getattr(health, name)
            if value is not None and value < 0:
                raise _negative(gpu.index, name, value)
        seen = 0  # bit n: port n listed
        for link in health.nvlinks:
            port = link.link
            if not 0 <= port < _MAX_NVLINKS:
                raise _bad(
                    f"GPU {gpu.index} health: NVLink port {port} is not 0..{_MAX_NVLINKS - 1}"
                )
            if seen >> port & 1:
                raise _bad(f"GPU {gpu.index} health: NVLink port {port} listed twice")
            seen |= 1 << port
            for name in _PORT_COUNTERS:
                value = getattr(link, name)
                if value is not None and value < 0:
                    raise _negative(gpu.index, f"nvlink {port} {name}", value)
        if len(health.reasons) > _MAX_REASONS:
            raise _bad(
                f"GPU {gpu.index} health: {len(health.reasons)} reasons (at most {_MAX_REASONS})"
            )


def _negative(gpu: int, name: str, value: int) -> FrameError:
    return _bad(f"GPU {gpu} health: {name} is {value}; a counter is never negative")


def _check_allocations(topology: NodeTopology, allocations: Iterable[ContainerAllocation]) -> None:
    for alloc in allocations:
        _check_cpus(f"allocation of {alloc.namespace}/{alloc.pod}", alloc.cpus, topology.cpu_count)


def unknown_holdings(
    topology: NodeTopology, allocations: Iterable[ContainerAllocation]
) -> list[tuple[str, str]]:
    """``(namespace/pod, id)`` of every GPU or MIG device a container holds that the node did not
    report. The kubelet's word is kept (it is what the container really got), so these are no
    reason to refuse a report; the inventory logs them and mismatches name them. A MIG id is
    checked only when every MIG instance has a UUID; other device plugins' ids are theirs."""
    devices = device_ids(topology)
    mig_known = all(inst.uuid for gpu in topology.gpus for inst in gpu.mig_instances)
    found: list[tuple[str, str]] = []
    for alloc in allocations:
        for dev in alloc.devices:
            mig = dev.resource.startswith(_MIG_PREFIX)
            if dev.resource != _GPU and not (mig and mig_known):
                continue
            where = f"{alloc.namespace}/{alloc.pod}"
            found += [(where, i) for i in dev.ids if device_uuid(i) not in devices]
    return found


def warn_unknown_holdings(
    node: str, topology: NodeTopology, allocations: Iterable[ContainerAllocation]
) -> None:
    """Log the first holding of a device the node did not report (with how many more)."""
    unknown = unknown_holdings(topology, allocations)
    if unknown:
        pod, device = unknown[0]
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        log.warning(
            "node %s: the kubelet says %s holds %s, not a device of this node%s; "
            "the holding is kept, not counted as the use of any GPU",
            node,
            pod,
            device[:64],
            more,
        )


def check_report(
    topology: NodeTopology, allocations: Iterable[ContainerAllocation] = ()
) -> frozenset[str]:
    """Raise ``FrameError`` unless the report is possible; returns its device UUIDs."""
    _check_topology_cpus(topology)
    _check_numa(topology)
    _check_nics(topology)
    return check_delta(topology, allocations)


def check_delta(
    topology: NodeTopology, allocations: Iterable[ContainerAllocation] = ()
) -> frozenset[str]:
    """:func:`check_report` of what a delta can change (the GPUs' state: health, memory, MIG;
    the allocations) on a topology whose hello passed it whole: the CPUs, NUMA nodes and NICs a
    delta cannot touch are not checked again on every frame."""
    _check_devices(topology)
    _check_memory(topology)
    _check_mig(topology)
    _check_health(topology)
    _check_allocations(topology, allocations)
    return device_ids(topology)
