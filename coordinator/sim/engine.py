"""Discrete-event replay of a trace over a cluster, under one placement policy.

Events are job arrivals and job completions. After the events of one instant are applied
(completions first, so freed capacity is there for arrivals at the same time), pending jobs are
tried in queue order — higher priority first, then earlier arrival — each placed all or nothing
through the policy; a job that does not fit waits and never blocks the jobs behind it (as
kube-scheduler's queue). Two facts keep a long replay cheap without changing its outcome:

- between completions capacity only shrinks, so a job that did not fit need not be tried again
  until something finishes: instants without a completion try only the new arrivals;
- inside one pass, a job of the same shape as one that just failed fails too: it is skipped;
- a job whose pods cannot possibly fit — fewer free whole GPUs, counted in pod-sized chunks per
  node, than the job has pods — is not handed to the policy at all (no policy could place it).
  Profiling showed failed whole-gang planning attempts taking most of a replay's time.

There is no preemption: priority orders the queue only. A placed job runs for its trace duration
stretched by the communication-cost model (:mod:`.costmodel`) of the placement it got.

This loop is not the coordinator's engine (``coordinator.engine.loop.Scheduler``) and does not
share its ``SchedulingQueue``: nothing backs off or waits a timeout, and time is the trace's, not
a clock. A policy's decision is assumed on the core's ``Snapshot`` at once (no binder, no
``ClusterWriter``) and forgotten when the job completes.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from common import labels as L
from common import podkeys
from common.model import Link, worst_link
from coordinator.core.domains.summary import stranded_gpus
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.sim.costmodel import CostModel
from coordinator.sim.locality import best_link_rank, span
from coordinator.sim.metrics import JobOutcome, RunResult, UsagePoint
from coordinator.sim.pods import gpu_type_values, job_pods
from coordinator.sim.policies import Policy, Slot
from coordinator.sim.trace import Job

__all__ = ["Simulator"]


@dataclass(slots=True)
class _Usage:
    """Whole-GPU and MIG use per node, with the cluster's idle-GPU fragmentation kept current."""

    total: Mapping[str, int]  # whole GPUs per node
    used: dict[str, int] = field(default_factory=dict)
    mig_used: int = 0
    busy: int = 0
    fragmentation: int = 0  # idle GPUs on partly used nodes

    def _frag(self, node: str) -> int:
        used = self.used.get(node, 0)
        return stranded_gpus(self.total.get(node, 0) - used, used)

    def room_for(self, gpus: int, pods: int, nodes: Sequence[str] | None) -> str | None:
        """Why ``pods`` pods of ``gpus`` whole GPUs each cannot fit on ``nodes`` (None: all),
        counting free GPUs only; None when they might."""
        if gpus <= 0 or (nodes is not None and not nodes):
            return None  # nothing to count (no node of that model): the policy says why
        chunks = 0
        for node in self.total if nodes is None else nodes:
            chunks += (self.total[node] - self.used.get(node, 0)) // gpus
            if chunks >= pods:
                return None
        what = f"{pods} pods of {gpus} GPUs" if pods > 1 else f"a pod of {gpus} GPUs"
        return f"no room for {what}: {chunks} such slot(s) free on the nodes it may use"

    def change(self, slots: Sequence[Slot], sign: int) -> None:
        for slot in slots:
            node = slot.node
            self.fragmentation -= self._frag(node)
            n = len(slot.placement.gpus)
            self.used[node] = self.used.get(node, 0) + sign * n
            self.busy += sign * n
            self.mig_used += sign * len(slot.placement.mig)
            self.fragmentation += self._frag(node)


class Simulator:
    """One cluster and one trace; :meth:`run` replays it under a policy (a fresh snapshot each
    time, so policies are compared on identical input)."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        jobs: Sequence[Job],
        *,
        cost_model: CostModel | None = None,
    ) -> None:
        self.nodes = tuple(nodes)
        self.jobs = tuple(sorted(jobs, key=lambda j: j.arrival_s))
        self.cost = cost_model or CostModel()
        products = {n.labels[L.GPU_PRODUCT] for n in self.nodes if L.GPU_PRODUCT in n.labels}
        self.pods: tuple[Sequence[PodRequest], ...] = tuple(
            job_pods(j, products) for j in self.jobs
        )
        self._by_name = {n.name: n for n in self.nodes}
        # nodes of the GPU model a job names (None: any node), for the capacity precheck
        self.eligible: tuple[tuple[str, ...] | None, ...] = tuple(
            self._of_type(j.gpu_type, products) if j.gpu_type else None for j in self.jobs
        )
        self.whole_gpus = sum(n.allocatable.get(podkeys.GPU_RESOURCE, 0) for n in self.nodes)
        self.mig_instances = sum(
            v
            for n in self.nodes
            for k, v in n.allocatable.items()
            if k.startswith(podkeys.MIG_RESOURCE_PREFIX)
        )

    def _of_type(self, gpu_type: str, products: set[str]) -> tuple[str, ...]:
        values = set(gpu_type_values(gpu_type, products))
        return tuple(n.name for n in self.nodes if n.labels.get(L.GPU_PRODUCT) in values)

    # --- placement quality ------------------------------------------------------------------
    def _span(self, nodes: Sequence[str]) -> str:
        return span([self._by_name[n].labels for n in dict.fromkeys(nodes)])

    def _outcome(self, job: Job, slots: Sequence[Slot], start: float) -> JobOutcome:
        worst = Link("X")
        multi = 0
        best = 0
        for slot in slots:
            gpus = slot.placement.gpus
            topology = self._by_name[slot.node].topology
            if len(gpus) < 2 or topology is None:
                continue
            link = worst_link(topology, gpus)
            multi += 1
            if link.rank <= best_link_rank(topology, len(gpus)):
                best += 1
            if link.rank > worst.rank:
                worst = link
        nodes = tuple(slot.node for slot in slots)
        span = self._span(nodes)
        stretch = self.cost.stretch(worst.kind, span)
        return JobOutcome(
            job=job,
            start_s=start,
            end_s=start + job.duration_s * stretch,
            nodes=tuple(dict.fromkeys(nodes)),
            worst_link=str(worst) if multi else "",
            multi_gpu_pods=multi,
            best_link_pods=best,
            span=span,
            stretch=stretch,
        )

    # --- replay ---------------------------------------------------------------------------------
    def run(
        self, policy: Policy, *, progress: Callable[[int, int], None] | None = None
    ) -> RunResult:
        snapshot = Snapshot(self.nodes)
        usage = _Usage({n.name: n.allocatable.get(podkeys.GPU_RESOURCE, 0) for n in self.nodes})
        jobs, pods = self.jobs, self.pods
        # (time, kind, index): kind 0 = completion (applied first), 1 = arrival
        events: list[tuple[float, int, int]] = [(j.arrival_s, 1, i) for i, j in enumerate(jobs)]
        heapq.heapify(events)
        pending: list[tuple[int, float, int]] = []  # (-priority, arrival, index), sorted
        running: dict[int, list[Slot]] = {}
        outcomes: dict[int, JobOutcome] = {}
        reasons: dict[int, str] = {}
        points: list[UsagePoint] = []
        attempts = 0
        done = 0
        while events:
            now = events[0][0]
            freed = False
            arrived: list[int] = []
            while events and events[0][0] == now:
                _, kind, i = heapq.heappop(events)
                if kind == 0:
                    slots = running.pop(i)
                    for slot in slots:
                        snapshot.forget(slot.pod.key)
                    usage.change(slots, -1)
                    freed = True
                    done += 1
                else:
                    bisect.insort(pending, (-jobs[i].priority, jobs[i].arrival_s, i))
                    arrived.append(i)
            if freed:
                candidates = list(pending)
            else:
                new = set(arrived)
                candidates = [e for e in pending if e[2] in new]
            failed: dict[tuple[object, ...], str] = {}  # shape → why it did not fit
            placed: list[tuple[int, float, int]] = []
            for entry in candidates:
                i = entry[2]
                job = jobs[i]
                shape = (
                    job.gpus,
                    job.mig_profile,
                    job.gpu_type,
                    job.gang_size,
                    job.cpu_per_pod,
                    job.memory_gib_per_pod,
                    job.numa_policy,
                )
                why = failed.get(shape)
                if why is not None:
                    reasons[i] = why
                    continue
                short = usage.room_for(job.whole_gpus, job.gang_size, self.eligible[i])
                if short is not None:
                    failed[shape] = reasons[i] = short
                    continue
                attempts += 1
                result = policy.place(pods[i], snapshot)
                if isinstance(result, str):
                    failed[shape] = reasons[i] = result
                    continue
                for slot in result:
                    snapshot.assume(slot.pod, slot.node, slot.placement, slot.claims)
                usage.change(result, +1)
                running[i] = result
                outcome = self._outcome(job, result, now)
                outcomes[i] = outcome
                reasons.pop(i, None)
                heapq.heappush(events, (outcome.end_s, 0, i))
                placed.append(entry)
            for entry in placed:
                del pending[bisect.bisect_left(pending, entry)]
            points.append(UsagePoint(now, usage.busy, usage.mig_used, usage.fragmentation))
            if progress is not None:
                progress(done, len(jobs))
        return RunResult(
            policy=policy.name,
            jobs=jobs,
            outcomes=outcomes,
            unplaced={i: reasons.get(i, "never tried") for _, _, i in pending},
            usage=points,
            whole_gpus=self.whole_gpus,
            mig_instances=self.mig_instances,
            attempts=attempts,
        )
