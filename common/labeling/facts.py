"""Node-wide facts derived from one topology snapshot, shared by several labelers.

Each function is pure and answers ``None`` for *unknown* (the hardware did not say), so a labeler
can write ``unknown`` instead of guessing.
"""

from __future__ import annotations

from collections import Counter

from common.model import Gpu, NodeTopology


def product(topology: NodeTopology) -> str | None:
    """The GPU product when every GPU reports the same one; ``None`` when unknown or mixed."""
    names = {gpu.product for gpu in topology.gpus}
    if len(names) != 1:
        return None
    return next(iter(names))


def smallest_memory_mib(topology: NodeTopology) -> int | None:
    """MiB of the smallest GPU; ``None`` if any GPU's memory is unknown or there are none."""
    sizes = [gpu.memory_total_mib for gpu in topology.gpus]
    if not sizes or any(size is None for size in sizes):
        return None
    return min(size for size in sizes if size is not None)


def compute_capability(topology: NodeTopology) -> str | None:
    """The compute capability shared by all GPUs (``None`` when unknown or mixed)."""
    caps = {gpu.compute_capability for gpu in topology.gpus}
    if len(caps) != 1:
        return None
    return next(iter(caps))


def any_true(values: list[bool | None]) -> bool | None:
    """``True`` if any is true, ``False`` if all are known and false, else ``None``."""
    if any(v is True for v in values):
        return True
    if values and all(v is False for v in values):
        return False
    return None


def mig_capable(topology: NodeTopology) -> bool | None:
    return any_true([gpu.mig_capable for gpu in topology.gpus])


def mig_enabled(topology: NodeTopology) -> bool | None:
    return any_true([gpu.mig_enabled for gpu in topology.gpus])


def mig_instances_by_profile(topology: NodeTopology) -> dict[str, int]:
    """Existing MIG instances on the node counted per profile, smallest slices first."""
    counts: Counter[str] = Counter()
    slices: dict[str, tuple[int, int]] = {}
    for gpu in topology.gpus:
        for inst in gpu.mig_instances:
            counts[inst.profile] += 1
            slices[inst.profile] = (inst.slices, inst.memory_mib)
    return {p: counts[p] for p in sorted(counts, key=lambda p: (*slices[p], p))}


def mig_layout(topology: NodeTopology) -> str | None:
    """``1g.10gb:7,3g.40gb:1``, or ``None`` when the node has no MIG instances."""
    counts = mig_instances_by_profile(topology)
    if not counts:
        return None
    return ",".join(f"{profile}:{n}" for profile, n in counts.items())


def healthy_count(topology: NodeTopology) -> int:
    return sum(1 for gpu in topology.gpus if gpu.healthy)


def unhealthy(topology: NodeTopology) -> list[Gpu]:
    return [gpu for gpu in topology.gpus if not gpu.healthy]


def memory_quantity(mib: int) -> str:
    """A Kubernetes quantity for MiB: ``64Gi`` when whole GiB, else ``1500Mi``."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"
