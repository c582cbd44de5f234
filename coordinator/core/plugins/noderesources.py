"""Resource fit, as kube-scheduler's NodeResourcesFit plugin.

Filter: for every resource the pod requests (cpu, memory, ephemeral-storage, extended resources
such as ``nvidia.com/gpu`` and ``nvidia.com/mig-1g.10gb``) the node's allocatable minus what its
pods (bound by any scheduler) request must cover it, and one more pod must fit under ``pods``.
Every short resource is reported ("Insufficient cpu", "Too many pods"); a request larger than the
node's whole allocatable is unresolvable (no preemption can help). An extended resource the node
does not list, where a DeviceClass serves it (KEP-5004), is left to DynamicResources.
Score: LeastAllocated over cpu and memory (kube-scheduler's default), or MostAllocated when
packing is configured.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.quantity import format_bytes
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import DRA_SERVED
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Code, Reason, Status

__all__ = ["NodeResourcesFit"]

_TOO_MANY = Reason.TOO_MANY_PODS


def _show(resource: str, amount: int) -> str:
    if resource == "cpu":
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    if resource in ("memory", "ephemeral-storage"):
        return format_bytes(amount)
    return str(amount)


class NodeResourcesFit:
    name = "NodeResourcesFit"
    node_local = True

    def __init__(self, config: SchedulerConfig) -> None:
        self.most_allocated = False  # kube-scheduler's default scoring: spread cpu/memory

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        alloc = node.allocatable
        used = node.requested
        reasons: list[str] = []
        details: list[str] = []
        unresolvable = False
        pods_alloc = alloc.get("pods")
        if pods_alloc is not None and used.get("pods", 0) + 1 > pods_alloc:
            reasons.append(_TOO_MANY)
            details.append(f"pods: {used.get('pods', 0)} of {pods_alloc} in use")
        served = state.get(DRA_SERVED)
        for resource, amount in pod.requests.items():
            have = alloc.get(resource, 0)
            if served and have == 0 and resource in served:
                continue  # served by DRA here (KEP-5004): DynamicResources allocates it
            if used.get(resource, 0) + amount > have:
                reasons.append(Reason.insufficient(resource))
                free = max(0, have - used.get(resource, 0))
                details.append(
                    f"{resource}: requested {_show(resource, amount)}, free {_show(resource, free)}"
                    f" of {_show(resource, have)}"
                )
                if amount > have:
                    unresolvable = True
        if not reasons:
            return SUCCESS
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
        return Status(code, tuple(reasons), detail="; ".join(details))

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        total = 0.0
        n = 0
        for resource in ("cpu", "memory"):
            cap = node.allocatable.get(resource, 0)
            if cap <= 0:
                continue
            after = node.requested.get(resource, 0) + pod.requests.get(resource, 0)
            share = min(1.0, after / cap)
            total += share if self.most_allocated else 1.0 - share
            n += 1
        return 100.0 * total / n if n else 0.0
