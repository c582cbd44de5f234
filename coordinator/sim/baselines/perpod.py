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

from collections.abc import Iterable, Sequence
from typing import Final

from common.podkeys import GPU_RESOURCE
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.packing import Placement as DomainPlacement
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import PLACEMENTS, Plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.gangs.cycle import GangDecision
from coordinator.core.gangs.plan import GangPlan
from coordinator.core.plugins import noderesources
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import PLUGINS, build_framework, weights_of
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["FirstFreeGpus", "LeastAllocated", "baseline_framework", "members_one_by_one"]


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


class LeastAllocated(Plugin):
    """kube-scheduler's NodeResourcesFit LeastAllocated strategy over cpu, memory and
    ``nvidia.com/gpu`` (equal weights): the share left free after placing the pod, cpu and
    memory counted as kube's scoring counts them (non-zero requests: 100m and 200 MiB for a
    container without a request)."""

    name = "LeastAllocated"
    node_local = True

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        total = 0.0
        n = 0
        for cap, after in (
            (node.allocatable.get("cpu", 0), node.nonzero_requested.cpu + pod.nonzero.cpu),
            (node.allocatable.get("memory", 0), node.nonzero_requested.memory + pod.nonzero.memory),
            (
                node.allocatable.get(GPU_RESOURCE, 0),
                node.requested.get(GPU_RESOURCE, 0) + pod.requests.get(GPU_RESOURCE, 0),
            ),
        ):
            if cap <= 0:
                continue
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


def members_one_by_one(
    pods: Sequence[PodRequest],
    snapshot: Snapshot,
    framework: Framework,
    *,
    min_member: int | None = None,
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    within: Iterable[str] | None = None,
) -> GangDecision | Status:
    """A gang as the Coscheduling plugin places it on kube-scheduler: every member in turn by
    the profile's own rule (on a copy, each seeing the ones before), all or nothing — no
    network-domain planning. The engine's gang step runs it in place of ``schedule_gang`` for
    the baselines (:class:`coordinator.core.gangs.cycle.GangPlanner`)."""
    trial = snapshot.copy()
    nodes = None if within is None else tuple(within)
    decisions: list[Decision] = []
    for pod in pods:
        result = schedule_one(pod, trial, framework, candidate_nodes=nodes)
        if not isinstance(result, Decision):
            if result.pod_status is not None:
                return result.pod_status
            return Status.unschedulable(result.message)
        trial.assume(pod, result.node, result.placement, result.claims)
        decisions.append(result)
    assignments = tuple((d.pod_key, d.node) for d in decisions)
    placement = DomainPlacement(
        assignments=assignments,
        tier="cluster",
        domain="cluster",
        nodes=tuple(dict.fromkeys(d.node for d in decisions)),
        leaves=(),
        spines=(),
        adjacent=False,
        strategy=(intent or PlacementIntent()).strategy,
        notes=(f"{framework.name}: member by member",),
    )
    plan = GangPlan(placement=placement, planned=tuple(sorted(p.key for p in pods)), left_over=())
    return GangDecision(plan=plan, decisions=tuple(decisions), rounds=1)
