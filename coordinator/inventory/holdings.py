"""Who holds each device on a node: the kubelet's word (the agent's PodResources report) over
Topos's ``topos.io/assigned-gpus``.

Where the classic device plugin serves a pod, the node may give it other devices than Topos
assigned. The inventory records what the node really gave: a pod the agent reports holdings for
is counted on those devices — in ``gpu_use`` (``GET /v1/nodes/{name}``) and in the scheduler's
snapshot (``BoundPod.held_gpus``, read by ``core.snapshot.podinfo.bound_pod_info``) — and its
assignment is only a claim until the kubelet has started it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from common import podkeys
from common.model import NodeTopology
from common.wire import ContainerAllocation
from coordinator.core.podspec.sharing import WHOLE, parse_held
from coordinator.inventory.mismatch import holdings_by_pod
from coordinator.inventory.state import BoundPod, GpuHolder, GpuUse

__all__ = ["gpu_use", "with_holdings"]


def gpu_use(
    topology: NodeTopology | None,
    pods: Iterable[BoundPod],
    allocations: tuple[ContainerAllocation, ...],
) -> tuple[GpuUse, ...]:
    """Every GPU and MIG device of ``topology`` with its holders: the agent's report where it
    names the pod, else the pod's assignment (not started yet); a GPU pods share (time-slicing,
    MPS, or Topos's own shares) lists each, with its share. Free devices have none."""
    held = holdings_by_pod(allocations)
    holders: dict[str, list[GpuHolder]] = {}
    known: set[tuple[str, str]] = set()
    for pod in pods:
        key = (pod.namespace, pod.name)
        known.add(key)
        ids, source = (held[key], "agent") if key in held else (pod.assigned_gpus, "annotation")
        share = parse_held(pod.annotations.get(podkeys.GPU_SHARE, ""))
        holder = GpuHolder(
            pod=f"{pod.namespace}/{pod.name}",
            source=source,
            fraction=None if share is None else share.milli / WHOLE,
            memory_mib=None if share is None or not share.memory_mib else share.memory_mib,
        )
        for uuid in ids:
            holders.setdefault(uuid, []).append(holder)
    for (namespace, name), ids in held.items():
        if (namespace, name) not in known:  # the kubelet's word about a pod not listed here
            for uuid in ids:
                holders.setdefault(uuid, []).append(
                    GpuHolder(pod=f"{namespace}/{name}", source="agent")
                )
    out: list[GpuUse] = []
    for gpu in topology.gpus if topology is not None else ():
        out.append(_use(gpu.uuid, holders.get(gpu.uuid, ())))
        out += [_use(i.uuid, holders.get(i.uuid, ())) for i in gpu.mig_instances if i.uuid]
    return tuple(out)


def _use(uuid: str, holders: Sequence[GpuHolder]) -> GpuUse:
    if not holders:
        return GpuUse(uuid=uuid)
    shares = [h.fraction for h in holders]
    shared = len(holders) > 1 or shares[0] is not None
    free = None
    if shared and None not in shares:
        free = round(max(0.0, 1.0 - sum(f for f in shares if f is not None)), 3)
    return GpuUse(
        uuid=uuid,
        holder=holders[0].pod,
        source=holders[0].source,
        holders=tuple(holders),
        free_fraction=free,
    )


def with_holdings(
    pods: Iterable[BoundPod], allocations: tuple[ContainerAllocation, ...]
) -> tuple[BoundPod, ...]:
    """``pods`` with ``held_gpus`` set where the agent reports devices for a pod."""
    if not allocations:  # no agent's report (KWOK, CPU nodes): as they are, once none claims any
        as_is = tuple(pods)
        if not any(p.held_gpus for p in as_is):
            return as_is
    held = holdings_by_pod(allocations)
    out: list[BoundPod] = []
    for pod in pods:
        ids = held.get((pod.namespace, pod.name), ())
        out.append(pod if ids == pod.held_gpus else msgspec.structs.replace(pod, held_gpus=ids))
    return tuple(out)
