"""Placement policies the simulator compares, all on the scheduling core's ``Snapshot``.

``topos``     the real core: ``schedule_one`` with the default profile for single pods, and
              whole-gang planning (``schedule_gang``: narrowest network domain, then every member
              confirmed by the per-pod core) for gangs.
``spread``    what kube-scheduler does with the NVIDIA device plugin: the same filters for what
              Kubernetes knows (resources, node affinity, taints, unschedulable nodes), scored by
              LeastAllocated over cpu, memory and ``nvidia.com/gpu`` (the emptiest node wins),
              and inside the node the first free GPUs by index — no link or NUMA awareness.
``firstfit``  the same filters, no scoring: the first node in name order that fits, first free
              GPUs.

Both baselines place gangs all or nothing, member by member with their own rule (as the
Coscheduling plugin does on top of kube-scheduler), so the comparison is about *where*, not
about gang semantics. Baseline plugins are ordinary framework plugins run by the same
``schedule_one``; only GPU choice and scoring differ from Topos.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from common.podkeys import GPU_RESOURCE
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import PLACEMENTS, Plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.gangs.cycle import schedule_gang
from coordinator.core.plugins import noderesources
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import PLUGINS, build_framework, weights_of
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = [
    "POLICIES",
    "FirstFreeGpus",
    "LeastAllocated",
    "Policy",
    "Slot",
    "make_policy",
]


@dataclass(frozen=True, slots=True)
class Slot:
    """One pod's place: node and what it holds there."""

    pod: PodRequest
    node: str
    placement: Placement
    claims: tuple[ClaimAllocation, ...] = ()  # DRA claims allocated for it


class Policy(Protocol):
    name: str

    def place(self, pods: Sequence[PodRequest], snapshot: Snapshot) -> list[Slot] | str:
        """Where every pod of one job goes (all or nothing), or why it does not fit now.
        Must not change ``snapshot``."""
        ...


# --- baseline plugins ----------------------------------------------------------------------------


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


FIRST_FREE_GPUS: Final = PluginSpec(plugin=FirstFreeGpus)
LEAST_ALLOCATED: Final = PluginSpec(plugin=LeastAllocated, weight=1)

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


class _PerPod:
    """Single pods through ``schedule_one``; gangs member by member on a copy, all or nothing."""

    def __init__(self, name: str, framework: Framework) -> None:
        self.name = name
        self.framework = framework

    def place(self, pods: Sequence[PodRequest], snapshot: Snapshot) -> list[Slot] | str:
        if len(pods) == 1:
            result = schedule_one(pods[0], snapshot, self.framework)
            if isinstance(result, Decision):
                return [Slot(pods[0], result.node, result.placement, result.claims)]
            return result.message
        trial = snapshot.copy()
        slots: list[Slot] = []
        for pod in pods:
            result = schedule_one(pod, trial, self.framework)
            if not isinstance(result, Decision):
                return f"{len(slots)}/{len(pods)} members placed; {result.message}"
            trial.assume(pod, result.node, result.placement, result.claims)
            slots.append(Slot(pod, result.node, result.placement, result.claims))
        return slots


class ToposPolicy(_PerPod):
    def __init__(self, framework: Framework | None = None) -> None:
        super().__init__("topos", framework or build_framework())

    def place(self, pods: Sequence[PodRequest], snapshot: Snapshot) -> list[Slot] | str:
        if len(pods) == 1:
            return super().place(pods, snapshot)
        result = schedule_gang(pods, snapshot, self.framework, min_member=len(pods))
        if isinstance(result, Status):
            return result.message
        by_key = {p.key: p for p in pods}
        return [Slot(by_key[d.pod_key], d.node, d.placement, d.claims) for d in result.decisions]


POLICIES: Final[Mapping[str, str]] = {
    "topos": "Topos (topology-aware core + whole-gang planning)",
    "spread": "kube-scheduler-like spread (LeastAllocated, first free GPUs)",
    "firstfit": "naive first-fit (first node that fits, first free GPUs)",
}


def make_policy(name: str) -> Policy:
    if name == "topos":
        return ToposPolicy()
    if name in ("spread", "firstfit"):
        return _PerPod(name, baseline_framework(name))
    raise KeyError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
