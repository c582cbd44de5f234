"""Who holds each device on a node: the kubelet's word (the agent's PodResources report) over
Topos's ``topos.io/assigned-gpus``.

Where the classic device plugin serves a pod, the node may give it other devices than Topos
assigned. The inventory records what the node really gave: a pod the agent reports holdings for
is counted on those devices — in ``gpu_use`` (``GET /v1/nodes/{name}``) and in the scheduler's
snapshot (``BoundPod.held_gpus``, read by ``core.snapshot.podinfo.bound_pod_info``) — and its
assignment is only a claim until the kubelet has started it.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from common.model import NodeTopology
from common.wire import ContainerAllocation
from coordinator.inventory.mismatch import holdings_by_pod
from coordinator.inventory.state import BoundPod, GpuUse

__all__ = ["gpu_use", "with_holdings"]


def gpu_use(
    topology: NodeTopology | None,
    pods: Iterable[BoundPod],
    allocations: tuple[ContainerAllocation, ...],
) -> tuple[GpuUse, ...]:
    """Every GPU and MIG device of ``topology`` with its holder: the agent's report where it
    names the pod, else the pod's assignment (not started yet), else free."""
    held = holdings_by_pod(allocations)
    uses: dict[str, GpuUse] = {}
    for pod in pods:
        if (pod.namespace, pod.name) in held:
            continue  # the kubelet's word, below, replaces the assignment
        for uuid in pod.assigned_gpus:
            uses[uuid] = GpuUse(
                uuid=uuid, holder=f"{pod.namespace}/{pod.name}", source="annotation"
            )
    for (namespace, name), ids in held.items():
        for uuid in ids:
            uses[uuid] = GpuUse(uuid=uuid, holder=f"{namespace}/{name}", source="agent")
    out: list[GpuUse] = []
    for gpu in topology.gpus if topology is not None else ():
        out.append(uses.get(gpu.uuid, GpuUse(uuid=gpu.uuid)))
        out += [uses.get(i.uuid, GpuUse(uuid=i.uuid)) for i in gpu.mig_instances if i.uuid]
    return tuple(out)


def with_holdings(
    pods: Iterable[BoundPod], allocations: tuple[ContainerAllocation, ...]
) -> tuple[BoundPod, ...]:
    """``pods`` with ``held_gpus`` set where the agent reports devices for a pod."""
    held = holdings_by_pod(allocations)
    out: list[BoundPod] = []
    for pod in pods:
        ids = held.get((pod.namespace, pod.name), ())
        out.append(pod if ids == pod.held_gpus else msgspec.structs.replace(pod, held_gpus=ids))
    return tuple(out)
