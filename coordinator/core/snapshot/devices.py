"""GPU, MIG and NUMA bookkeeping of one node: which device each pod holds (a whole GPU, a MIG
instance, or a share of a GPU it splits with others), how many device slots the node has and
uses, and the free capacity of each NUMA node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.model import NodeTopology
from common.podkeys import GPU_RESOURCE
from coordinator.core.podspec.sharing import HeldShare
from coordinator.core.snapshot.podinfo import NumaUse, PodInfo

__all__ = [
    "DeviceUse",
    "NumaFree",
    "SharedGpu",
    "device_use",
    "gpu_numa",
    "mig_device_id",
    "numa_usage",
    "slots",
    "slots_used",
]


def gpu_numa(topology: NodeTopology, index: int) -> int | None:
    """The NUMA node of a GPU; on a node with a single NUMA node, that one even when the GPU
    did not say (VMs and some boards report no affinity)."""
    numa = topology.gpus[index].numa_node
    if numa is None and len(topology.numa_nodes) == 1:
        return topology.numa_nodes[0].id
    return numa


def mig_device_id(topology: NodeTopology, gpu: int, gi_id: int) -> str:
    """The id written in ``topos.io/assigned-gpus`` for a MIG instance: its ``MIG-…`` UUID when
    known, else ``<GPU UUID>/gi<id>``."""
    g = topology.gpus[gpu]
    for inst in g.mig_instances:
        if inst.gi_id == gi_id and inst.uuid:
            return inst.uuid
    return f"{g.uuid}/gi{gi_id}"


@dataclass(frozen=True, slots=True)
class NumaFree:
    """Free capacity of one NUMA node."""

    numa: int
    cpu_milli: int
    memory: int
    gpus: tuple[int, ...]  # free whole GPUs attached to it
    busy: bool  # some pod holds CPU, memory or a device here


@dataclass(frozen=True, slots=True)
class SharedGpu:
    """A GPU split between fractional pods: who holds what, and the sums."""

    holders: tuple[tuple[str, HeldShare], ...]  # (pod key, its share), in pod order
    milli: int  # compute held, thousandths
    memory_mib: int  # memory held

    def add(self, pod: str, share: HeldShare) -> SharedGpu:
        return SharedGpu(
            (*self.holders, (pod, share)),
            self.milli + share.milli,
            self.memory_mib + share.memory_mib,
        )


_UNSHARED = SharedGpu((), 0, 0)


@dataclass(slots=True)
class DeviceUse:
    """Who holds which device of one node (see :func:`device_use`)."""

    gpu_owner: dict[int, str]  # whole GPUs
    mig_owner: dict[tuple[int, int], str]
    shared: dict[int, SharedGpu]  # GPUs split between fractional pods
    numa_use: dict[int, tuple[int, int]]  # NUMA id → (cpu milli, memory) pinned there
    busy: set[int]  # NUMA nodes some pod uses


def slots(topology: NodeTopology | None, allocatable: Mapping[str, int]) -> int:
    if topology is None:
        return allocatable.get(GPU_RESOURCE, 0)
    return sum((len(g.mig_instances) if g.mig_enabled else 1) for g in topology.gpus if g.healthy)


def slots_used(
    topology: NodeTopology | None,
    *,
    requested: Mapping[str, int],
    use: DeviceUse,
    held: int,
    attributed: int,
) -> int:
    """Device slots in use: whole GPUs, MIG instances, shared GPUs (each counts whole: no
    whole-GPU pod may have it), and GPUs held without saying which."""
    if topology is None:
        return requested.get(GPU_RESOURCE, 0)
    split = sum(1 for i in use.shared if i not in use.gpu_owner)
    return len(use.gpu_owner) + len(use.mig_owner) + split + max(0, held - attributed)


def numa_usage(p: PodInfo) -> Sequence[NumaUse]:
    """The CPU and memory ``p`` holds per NUMA node (none unless it is NUMA-pinned)."""
    usage: Sequence[NumaUse] = p.placement.numa_usage if p.placement else ()
    if not usage and p.numa:
        # Only ids are known (rebuilt from annotations): split requests evenly.
        k = len(p.numa)
        cpu, mem = p.requests.get("cpu", 0), p.requests.get("memory", 0)
        usage = [NumaUse(n, -(-cpu // k), -(-mem // k)) for n in p.numa]
    return usage


def device_use(topology: NodeTopology | None, pods: Sequence[PodInfo]) -> DeviceUse:
    gpu_owner: dict[int, str] = {}
    mig_owner: dict[tuple[int, int], str] = {}
    shared: dict[int, SharedGpu] = {}
    numa_use: dict[int, tuple[int, int]] = {}
    busy: set[int] = set()
    out = DeviceUse(gpu_owner, mig_owner, shared, numa_use, busy)
    if topology is None:
        return out
    by_uuid: dict[str, int] = {g.uuid: g.index for g in topology.gpus}
    by_mig: dict[str, tuple[int, int]] = {}
    for g in topology.gpus:
        for inst in g.mig_instances:
            by_mig[mig_device_id(topology, g.index, inst.gi_id)] = (g.index, inst.gi_id)
            if inst.uuid:
                by_mig[inst.uuid] = (g.index, inst.gi_id)
    for p in pods:
        gpus: list[int] = []
        migs: list[tuple[int, int]] = []
        if p.placement is not None:
            gpus.extend(p.placement.gpus)
            migs.extend(p.placement.mig)
        for dev in p.device_ids:
            if dev in by_uuid:
                gpus.append(by_uuid[dev])
            elif dev in by_mig:
                migs.append(by_mig[dev])
        for i in gpus:
            if p.share is not None:
                shared[i] = shared.get(i, _UNSHARED).add(p.key, p.share)
            else:
                gpu_owner[i] = p.key
            numa = gpu_numa(topology, i)
            if numa is not None:
                busy.add(numa)
        for m in migs:
            mig_owner[m] = p.key
            numa = gpu_numa(topology, m[0])
            if numa is not None:
                busy.add(numa)
        for u in numa_usage(p):
            c, m_ = numa_use.get(u.numa, (0, 0))
            numa_use[u.numa] = (c + u.cpu_milli, m_ + u.memory)
            busy.add(u.numa)
        if p.exclusive_numa:
            for n in p.numa:
                # An isolated pod's NUMA node is closed to everyone else.
                numa_use[n] = (10**15, 10**18)
                busy.add(n)
        elif p.numa:
            busy.update(p.numa)
    return out
