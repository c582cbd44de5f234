"""Per-pod baselines: ``firstfit`` and ``spread`` as framework profiles.

``spread``    what kube-scheduler does with the NVIDIA device plugin: the same filters for what
              Kubernetes knows (resources, node affinity, taints, unschedulable nodes), scored by
              LeastAllocated over cpu, memory and ``nvidia.com/gpu`` (the emptiest node wins),
              and inside the node the first free GPUs by index — no link or NUMA awareness.
``firstfit``  the same filters, no scoring: the first node in name order that fits, first free
              GPUs.

The plugins are ordinary framework plugins, run by the same ``schedule_one`` as Topos's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from common.podkeys import GPU_RESOURCE
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import PLACEMENTS, Plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.plugins import noderesources
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import PLUGINS, build_framework, weights_of
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["FirstFreeGpus", "LeastAllocated", "baseline_framework"]


class FirstFreeGpus(Plugin):
    """The device plugin without topology: any free GPUs will do, the lowest indices first; MIG
    instances of the requested profile, first free first."""

    name = "FirstFreeGpus"
    node_local = True

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        return SUCCESS if pod.wants_devices else SKIP

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        gpus: tuple[int, ...] = ()
        if pod.gpus:
            if node.topology is None or node.free_whole_gpus < pod.gpus:
                return Status.unschedulable(Reason.insufficient(GPU_RESOURCE))
            gpus = node.free_gpus[: pod.gpus]
        mig: list[tuple[int, int]] = []
        for profile, count in pod.mig:
            free = node.free_mig.get(profile, ())
            if len(free) < count:
                return Status.unschedulable(Reason.MIG_PROFILE)
            mig.extend(free[:count])
        state.read(PLACEMENTS)[node.name] = Placement(gpus=gpus, mig=tuple(mig))
        return SUCCESS


_SPREAD_RESOURCES: Final = ("cpu", "memory", GPU_RESOURCE)


class LeastAllocated(Plugin):
    """kube-scheduler's NodeResourcesFit LeastAllocated strategy over cpu, memory and
    ``nvidia.com/gpu`` (equal weights): the share left free after placing the pod."""

    name = "LeastAllocated"
    node_local = True

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        total = 0.0
        n = 0
        for resource in _SPREAD_RESOURCES:
            cap = node.allocatable.get(resource, 0)
            if cap <= 0:
                continue
            after = node.requested.get(resource, 0) + pod.requests.get(resource, 0)
            total += 1.0 - min(1.0, after / cap)
            n += 1
        return 100.0 * total / n if n else 0.0


FIRST_FREE_GPUS: Final = PluginSpec[None](plugin=FirstFreeGpus)
LEAST_ALLOCATED: Final = PluginSpec[None](plugin=LeastAllocated, weight=1)

#: kube-scheduler's node gates and NodeResourcesFit, then GPUs without topology.
_BASELINE_FILTERS: Final = (
    *(spec.name for spec in PLUGINS if spec.plugin.node_gate),
    noderesources.PLUGIN.name,
    FIRST_FREE_GPUS.name,
)


def baseline_framework(name: str) -> Framework:
    if name == "spread":
        # Kubernetes' own preferences still count (affinity, taints); the node score is
        # LeastAllocated instead of NodeResourcesFit's cpu/memory-only variant.
        weights = {noderesources.PLUGIN.name: 0}
        profile: Sequence[str] = (*_BASELINE_FILTERS, LEAST_ALLOCATED.name)
    elif name == "firstfit":
        weights = dict.fromkeys(weights_of(SchedulerConfig()), 0)
        profile = _BASELINE_FILTERS
    else:
        raise KeyError(name)
    config = SchedulerConfig(weights=weights)
    plugins = (*PLUGINS, FIRST_FREE_GPUS, LEAST_ALLOCATED)
    return build_framework(config, plugins=plugins, profile=profile)
