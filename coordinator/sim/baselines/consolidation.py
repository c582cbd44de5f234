"""A KAI-style consolidation baseline for defragmentation (``benchmarks/defrag_replay.py``): what
KAI Scheduler's ``consolidation`` action does for one pending job, planned with Topos's own
placement so that only the choice of moves differs.

KAI (``pkg/scheduler/actions/consolidation``): for each pending job in queue order, when the
cluster has enough allocatable GPUs for it, a solver accumulates preemptible running jobs as
victims one job at a time, in KAI's victim order (``GetVictimsQueue``: lowest priority first,
then the most recently started), testing at most ``maxConsolidationPreemptees`` of them (16 by
default); the first scenario where the pending job is allocated *and every victim is allocated
again elsewhere* (``allPodsReallocated``) is committed. There is no cost model: the work lost
is not weighed against the job's.

Here: the movable pods (a gang as one job) of priority at most the waiting workload's, in that
order; after adding each, Topos's victim search (``select_victims``, the workload's placement
intent) over the victims so far; the first plan whose moved pods all fit elsewhere
(``relocate``) is the one made, whatever it loses. Minimum runtimes and PodDisruptionBudgets
bind it as they bind Topos.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.packing import EligibleFn, Member
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.preemption.defrag import CANNOT, DefragPlan, DefragSettings
from coordinator.core.preemption.model import DisruptionBudget, RunningPod
from coordinator.core.preemption.protections import Protections, evictable_units
from coordinator.core.preemption.relocate import RelocateFn, by_requests
from coordinator.core.preemption.victims import select_victims
from coordinator.core.status import Status

__all__ = ["MAX_PREEMPTEES", "kai_consolidation"]

#: KAI's ``--max-consolidation-preemptees`` default: victim jobs tested per pending job.
MAX_PREEMPTEES: Final = 16


def _victim_order(pods: Sequence[RunningPod]) -> list[list[RunningPod]]:
    """Jobs (a gang whole, else a pod), lowest priority first, then the most recently started."""
    jobs: dict[str, list[RunningPod]] = {}
    for pod in pods:
        jobs.setdefault(pod.gang or pod.key, []).append(pod)

    def key(job: list[RunningPod]) -> tuple[int, float, str]:
        started = max((p.started_at or 0.0) for p in job)
        return (max(p.priority for p in job), -started, job[0].key)

    return sorted(jobs.values(), key=key)


def kai_consolidation(
    waiting: Sequence[Member],
    *,
    priority: int,
    nodes: Sequence[NodeState],
    running: Sequence[RunningPod],
    settings: DefragSettings,
    budgets: Sequence[DisruptionBudget] = (),
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    eligible: EligibleFn | None = None,
    now: float | None = None,
    protections: Protections | None = None,
    relocate: RelocateFn | None = None,
) -> DefragPlan | Status:
    """:func:`~coordinator.core.preemption.defrag.plan_defrag`'s signature; ``settings``' cost
    model is not applied (KAI has none)."""
    need = sum(m.requests.get(GPU, 0) for m in waiting)
    if need == 0 or sum(n.gpus_free for n in nodes if n.schedulable) < need:
        return Status.unschedulable(CANNOT, detail="too few GPUs are free for it anywhere")
    if relocate is None:
        relocate = by_requests(
            {n.name: n.free for n in nodes if n.schedulable}, {m.name: m.requests for m in waiting}
        )
    order = _victim_order([p for p in running if p.movable and p.priority <= priority])
    victims: list[RunningPod] = []
    for job in order[:MAX_PREEMPTEES]:
        victims.extend(job)
        found = select_victims(
            waiting,
            priority=priority + 1,
            nodes=nodes,
            running=victims,
            budgets=budgets,
            intent=intent,
            keys=keys,
            eligible=eligible,
            now=now,
            protections=protections,
        )
        if isinstance(found, Status) or not found.victims:
            continue
        chosen = set(found.victim_pods)
        moved = [p for p in victims if p.key in chosen]
        placed = relocate(moved, found.nominated)
        if isinstance(placed, str):
            continue  # not every victim is allocated again: KAI does not commit it
        units = evictable_units(moved, below=priority + 1, now=now)
        return DefragPlan(
            plan=found,
            destinations=tuple(placed),
            lost_gpu_seconds=sum(u.cost.gpu_seconds for u in units.units),
            value_gpu_seconds=need * settings.horizon_s,
        )
    return Status.unschedulable(CANNOT, detail="no consolidation of up to 16 jobs makes room")
