"""Resource fit, as kube-scheduler's NodeResourcesFit plugin.

Filter: for every resource the pod requests (cpu, memory, ephemeral-storage, extended resources
such as ``nvidia.com/gpu`` and ``nvidia.com/mig-1g.10gb``) the node's allocatable minus what its
pods (bound by any scheduler) request must cover it, and one more pod must fit under ``pods``.
Every short resource is reported ("Insufficient cpu", "Too many pods"); a request larger than the
node's whole allocatable is unresolvable (no preemption can help). An extended resource the node
does not list, where a DeviceClass serves it (KEP-5004), is left to DynamicResources; a GPU
share's resources (HAMi's ``nvidia.com/gpumem``…, docs/sharing.md) a node does not list are left
to GpuTopology (the kubelet, too, admits a pod asking for extended resources its node lacks).
A pod asking for MIG by ``topos.io/mig-profile`` with ``nvidia.com/gpu`` (the device plugin's
"single" strategy) is refused on a node whose device plugin runs the "mixed" strategy — there
``nvidia.com/gpu`` is a whole GPU, and the kubelet would hand out one of those or none — with a
reason naming the resource to ask for instead (:func:`mixed_strategy_reason`).
Score: LeastAllocated over cpu and memory (kube-scheduler's default), or MostAllocated when
packing is configured, counting what kube's scoring counts: *non-zero* requests, where a
container that requests no cpu counts 100m and one that requests no memory 200 MiB (on the node,
:attr:`NodeInfo.nonzero_requested`, and for the pod, :attr:`PodRequest.nonzero`), so pods that
request nothing spread over equal nodes instead of piling onto the first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Final

from common import labels
from common.podkeys import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from common.quantity import format_bytes
from coordinator.core.framework.config_errors import ConfigError
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import DRA_SERVED, Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import SHARE_RESOURCES
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Code, Reason, Status

__all__ = [
    "NodeResourcesFit",
    "NodeResourcesFitArgs",
    "ScoringStrategy",
    "mig_strategy",
    "mixed_strategy_reason",
]

_TOO_MANY = Reason.TOO_MANY_PODS


def _show(resource: str, amount: int) -> str:
    if resource == "cpu":
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    if resource in ("memory", "ephemeral-storage"):
        return format_bytes(amount)
    return str(amount)


def mig_strategy(node: NodeInfo) -> str:
    """The node's MIG strategy: GFD's label when present, else ``mixed`` where the node advertises
    ``nvidia.com/mig-<profile>`` resources (only that strategy does), else ``single``."""
    label = node.labels.get(labels.GFD_MIG_STRATEGY)
    if label in ("single", "mixed", "none"):
        return label
    return "mixed" if any(r.startswith(MIG_RESOURCE_PREFIX) for r in node.allocatable) else "single"


def mixed_strategy_reason(pod: PodRequest) -> str:
    """What a ``topos.io/mig-profile`` pod should ask for on a mixed-strategy node."""
    ask = ", ".join(f"{MIG_RESOURCE_PREFIX}{profile}: {n}" for profile, n in pod.mig)
    return (
        f"node(s) run the mixed MIG strategy, where {GPU_RESOURCE} is a whole GPU: "
        f"request {ask} instead of {GPU_RESOURCE} with topos.io/mig-profile"
    )


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    #: ``LeastAllocated`` (kube's default) prefers the emptier node, ``MostAllocated`` the fuller.
    type: str = "LeastAllocated"

    def __post_init__(self) -> None:
        if self.type not in ("LeastAllocated", "MostAllocated"):
            raise ConfigError(f"type: {self.type!r} is not LeastAllocated or MostAllocated")


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    """kube-scheduler's ``NodeResourcesFitArgs``, the part Topos reads."""

    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)


class NodeResourcesFit(Plugin):
    name = "NodeResourcesFit"
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for
    lasting_refusals = True  # pods added to a node only request more

    def __init__(self, args: NodeResourcesFitArgs | None = None) -> None:
        # kube-scheduler's default scoring spreads cpu/memory; a profile may ask for MostAllocated.
        strategy = (args or NodeResourcesFitArgs()).scoring_strategy
        self.most_allocated = strategy.type == "MostAllocated"

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        if pod.mig_from_annotation and mig_strategy(node) == "mixed":
            # No count of free devices helps: the kubelet would never give this pod a MIG device.
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (mixed_strategy_reason(pod),))
        alloc = node.allocatable
        used = node.requested
        pods_alloc = alloc.get("pods")
        if pods_alloc is None or used.get("pods", 0) < pods_alloc:
            for resource, amount in pod.requests.items():
                if used.get(resource, 0) + amount > alloc.get(resource, 0):
                    break
            else:  # everything fits (the usual case): no reasons to gather
                return SUCCESS
        reasons: list[str] = []
        details: list[str] = []
        unresolvable = False
        if pods_alloc is not None and used.get("pods", 0) + 1 > pods_alloc:
            reasons.append(_TOO_MANY)
            details.append(f"pods: {used.get('pods', 0)} of {pods_alloc} in use")
        served = state.get(DRA_SERVED)
        for resource, amount in pod.requests.items():
            have = alloc.get(resource, 0)
            if served and have == 0 and resource in served:
                continue  # served by DRA here (KEP-5004): DynamicResources allocates it
            if have == 0 and resource in SHARE_RESOURCES:
                continue  # a share's own words (nvidia.com/gpumem…): GpuTopology places it
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

    def candidates(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None:
        """The nodes listing every extended resource the pod asks for (an index lookup), when few
        do: scheduler_perf's SchedulingWithExtendedResource gives each node a resource of its
        own. ``None`` when the pod asks for one a node not listing it may still pass it with:
        one DRA serves (KEP-5004), a share's own words (GpuTopology places them)."""
        served = state.get(DRA_SERVED)
        if any(r in SHARE_RESOURCES or (served and r in served) for r in pod.requests):
            return None
        return snapshot.capacity().listing(pod.requests)

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        total = 0.0
        n = 0
        # kube's non-zero requests: a container without a cpu (memory) request counts 100m
        # (200 MiB) here, on the node and for the pod, so request-less pods spread too.
        for cap, after in (
            (node.allocatable.get("cpu", 0), node.nonzero_requested.cpu + pod.nonzero.cpu),
            (node.allocatable.get("memory", 0), node.nonzero_requested.memory + pod.nonzero.memory),
        ):
            if cap <= 0:
                continue
            share = min(1.0, after / cap)
            total += share if self.most_allocated else 1.0 - share
            n += 1
        return 100.0 * total / n if n else 0.0


PLUGIN: Final = PluginSpec(
    plugin=NodeResourcesFit,
    args=NodeResourcesFitArgs,
    factory=lambda args, _: NodeResourcesFit(args),
    weight=1,
    weight_key="node_resources",
)
