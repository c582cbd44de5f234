"""A trace replayed by the production engine on a simulated clock.

The cluster is the in-memory cluster (:class:`~coordinator.adapters.memory.cluster.MemoryCluster`)
holding one Node per described node (its agent's hello included), the scheduler is
:func:`~coordinator.adapters.memory.runtime.memory_runtime` with the policy's profile, and gangs,
preemption and recovery are :class:`~coordinator.engine.gangs.service.GangRuntime` with the
policy's gang planner — the objects ``topos coordinator --in-memory`` runs. Time is a
:class:`~coordinator.forecast.clock.SimulatedLoop`'s: every component gets ``loop.time`` as its
clock, and the loop jumps to the next timer whenever every task waits.

The replay plays the users and the kubelets around the engine:

- at a job's ``arrival_s`` its pods are created (``job_manifests``: what a user would submit);
- once every pod of a job is bound the job starts; it runs ``duration_s`` × the communication
  stretch of the placement it got (:mod:`.costmodel`), then its pods finish (phase
  ``Succeeded``: the kubelet's part);
- a pod of a started or starting job that is deleted by someone else (preempted, evicted by a
  gang timeout) restarts the whole job, as a Job or JobSet controller would: its other pods are
  deleted and all are created again; the work done is lost (counted: ``RunResult.lost_gpu_s``);
- at each of :attr:`ReplaySettings.faults`' times the hardware changes (:mod:`.faults`) and the
  node's agent reports it (a delta to the inventory; the health-blind run's without the
  verdicts): a GPU that fails fails the jobs on it, which start over as above
  (``RunResult.failed_jobs``); an NVLink that degrades under a running job slows the rest of its
  run to the pair's fallback class (``RunResult.slowed_jobs``). Run times always pay for the
  hardware as it is, whatever the scheduler saw.

The replay ends when no job is left to arrive, none holds a node, and nothing has changed for
:attr:`ReplaySettings.settle_s` simulated seconds (pods still pending then never fit).

:attr:`ReplaySettings.fill` replays as the FGD paper does (``benchmarks/sharing_trace.py``):
pods never finish, and a job whose first scheduling attempt fails is dropped (its pods deleted,
never tried again); the replay ends once every job is placed or dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from common import labels as L
from common import podkeys
from common.linkhealth import without_health, worst_effective_link
from common.model import Link, NodeTopology, worst_link
from common.wire import GpuState
from coordinator.core.domains.summary import stranded_gpus
from coordinator.core.queue import QueuedPod
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.engine.binder import BindJob
from coordinator.engine.observer import Outcome, SchedulingObserver
from coordinator.engine.ports import ClusterError
from coordinator.forecast.clock import SimulatedLoop
from coordinator.forecast.engine import EngineSettings, SimulatedEngine
from coordinator.sim.costmodel import CostModel
from coordinator.sim.faults import Fault, with_fault
from coordinator.sim.locality import best_link_rank, span
from coordinator.sim.metrics import JobOutcome, RunResult, UsagePoint
from coordinator.sim.pods import NAMESPACE, job_manifests
from coordinator.sim.policies import Policy
from coordinator.sim.trace import Job

__all__ = ["Arrival", "ReplaySettings", "Simulator"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaySettings:
    engine: EngineSettings = field(default_factory=EngineSettings)
    """The engine's settings (gang timeout, backoff, tick, preemption; the queue's backoff)."""
    settle_s: float = 600.0
    """Quiet simulated time, once nothing runs or arrives, before the replay ends."""
    poll_s: float = 60.0
    """How often (simulated) the replay checks whether it has ended."""
    health_blind: bool = False
    """The scheduler sees the nodes without the agent's health verdicts (degraded links, …);
    run times still pay for them (the baseline of ``benchmarks/health_placement.py``)."""
    faults: tuple[Fault, ...] = ()
    """Hardware faults while the replay runs (:mod:`.faults`), at their simulated times."""
    fill: bool = False
    """Fill the cluster (the FGD paper's replay): pods never finish, and a job whose first
    attempt fails is dropped, never retried."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """A job's pods were just created (:meth:`Simulator.run`'s ``on_arrival``): the engine as it
    is then, and when each started job's pods will end (simulated seconds)."""

    job: int  # its index in the trace (sorted by arrival)
    now: float
    engine: SimulatedEngine
    ends: Mapping[str, float]  # pod key → end, for every pod of a started job
    owner: Mapping[str, int]  # pod key → job index


@dataclass(slots=True)
class _Run:
    bound: dict[str, tuple[str, Placement]] = field(default_factory=dict)  # pod key → where
    generation: int = 0
    finish: asyncio.TimerHandle | None = None
    restarts: int = 0


class _Usage:
    """Whole-GPU and MIG use per node, with the idle GPUs stranded on partly used nodes."""

    def __init__(self, total: Mapping[str, int]) -> None:
        self.total = total
        self.used: dict[str, int] = {}
        self.busy = self.mig = self.fragmentation = 0

    def change(self, node: str, placement: Placement, sign: int) -> None:
        used = self.used.get(node, 0)
        total = self.total.get(node, 0)
        self.fragmentation -= stranded_gpus(total - used, used)
        n = len(placement.gpus) if placement.share is None else 0
        used += sign * n
        self.used[node] = used
        self.busy += sign * n
        self.mig += sign * len(placement.mig)
        self.fragmentation += stranded_gpus(total - used, used)


class _DropOnFailure(SchedulingObserver):
    """Fill mode: a pod's failed attempt drops its job (after the attempt, not inside it)."""

    def __init__(self, replay: _Replay) -> None:
        self.replay = replay

    def attempt(
        self, entry: QueuedPod, outcome: Outcome, *, began: float | None, now: float
    ) -> None:
        if outcome in ("unschedulable", "invalid"):
            i = self.replay.owner.get(entry.key)
            if i is not None:
                self.replay.loop.call_soon(self.replay._drop, i)


class Simulator:
    """One cluster and one trace; :meth:`run` replays it under a policy on the engine (a fresh
    cluster and engine each time, so policies are compared on identical input)."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        jobs: Sequence[Job],
        *,
        cost_model: CostModel | None = None,
        settings: ReplaySettings | None = None,
    ) -> None:
        self.nodes = tuple(nodes)
        self.jobs = tuple(sorted(jobs, key=lambda j: j.arrival_s))
        self.cost = cost_model or CostModel()
        self.settings = settings or ReplaySettings()
        products = {n.labels[L.GPU_PRODUCT] for n in self.nodes if L.GPU_PRODUCT in n.labels}
        self.manifests = tuple(job_manifests(j, products) for j in self.jobs)
        #: ``batch/v1`` Job objects the cluster holds from the start (a benchmark that makes
        #: the pods a Job's adds them): defragmentation reads whether their pods may move
        self.job_objects: tuple[Mapping[str, Any], ...] = ()
        self.whole_gpus = sum(n.allocatable.get(podkeys.GPU_RESOURCE, 0) for n in self.nodes)
        self.mig_instances = sum(
            v
            for n in self.nodes
            for k, v in n.allocatable.items()
            if k.startswith(podkeys.MIG_RESOURCE_PREFIX)
        )

    def run(
        self,
        policy: Policy,
        *,
        progress: Callable[[int, int], None] | None = None,
        on_arrival: Callable[[Arrival], None] | None = None,
    ) -> RunResult:
        """``on_arrival`` is called as each job's pods are created (simulated time stands still
        while it runs: a prediction may look at the engine then)."""
        loop = SimulatedLoop()

        async def replay() -> RunResult:
            return await _Replay(self, policy, loop, progress, on_arrival).run()

        try:
            return loop.run_until_complete(replay())
        finally:
            loop.close()


class _Replay:
    """Created inside the simulated loop, for one run."""

    def __init__(
        self,
        sim: Simulator,
        policy: Policy,
        loop: SimulatedLoop,
        progress: Callable[[int, int], None] | None,
        on_arrival: Callable[[Arrival], None] | None = None,
    ) -> None:
        self.on_arrival = on_arrival
        self.sim = sim
        self.policy = policy
        self.loop = loop
        self.progress = progress
        self.engine = SimulatedEngine(
            framework=policy.framework,
            planner=policy.planner,
            settings=sim.settings.engine,
            mover=policy.mover,
        )
        self.cluster = self.engine.cluster
        self.by_name = {n.name: n for n in sim.nodes}
        #: each node's hardware as it is now (faults change it); run times pay for this
        self.truth: dict[str, NodeTopology | None] = {n.name: n.topology for n in sim.nodes}
        self.seq: dict[str, int] = {}  # the agents' delta numbers
        blind = sim.settings.health_blind
        for n in sim.nodes:
            seen = without_health(n.topology) if blind and n.topology is not None else n.topology
            pods = n.allocatable.get("pods")  # the rest follows from the topology
            allocatable = None if pods is None else {"pods": pods}
            self.cluster.add_node(n.name, labels=n.labels, topology=seen, allocatable=allocatable)
        for obj in sim.job_objects:
            self.cluster.apply_job(obj)
        self.usage = _Usage({n.name: n.allocatable.get(podkeys.GPU_RESOURCE, 0) for n in sim.nodes})
        self.owner: dict[str, int] = {}  # pod key → job index
        for i, manifests in enumerate(sim.manifests):
            for m in manifests:
                self.owner[f"{NAMESPACE}/{m['metadata']['name']}"] = i
        self.runs: dict[int, _Run] = {}
        self.outcomes: dict[int, JobOutcome] = {}
        self.interrupted: list[JobOutcome] = []  # runs cut short (end_s: when)
        self.points: list[UsagePoint] = []
        self.arrivals_left = len(sim.jobs)
        self.bound_pods = 0
        self.done = 0
        self.dropped: dict[int, str] = {}  # fill mode: jobs whose first attempt failed → why
        self.lost_gpu_s = 0.0  # work of started jobs that started over
        self.lost_pods = 0
        self.failed_jobs = 0  # jobs on a GPU that failed
        self.slowed_jobs = 0  # running jobs an NVLink degraded under
        self._deleting = False

    # --- the users and kubelets around the engine ------------------------------------------------

    def _submit(self, i: int) -> None:
        self.arrivals_left -= 1
        self.runs.setdefault(i, _Run())
        for manifest in self.sim.manifests[i]:
            self.cluster.create_pod(manifest)
        if self.on_arrival is not None:
            ends = {
                key: outcome.end_s
                for j, outcome in self.outcomes.items()
                for key in self.runs[j].bound
            }
            self.on_arrival(Arrival(i, self._now(), self.engine, ends, self.owner))

    def _on_bind(self, job: BindJob, exc: ClusterError | None) -> None:
        i = self.owner.get(job.request.key)
        if exc is not None or i is None:
            return
        run = self.runs[i]
        node, placement = job.decision.node, job.decision.placement
        run.bound[job.request.key] = (node, placement)
        self.bound_pods += 1
        self.usage.change(node, placement, +1)
        self._point()
        if len(run.bound) == self.sim.jobs[i].gang_size:
            outcome = self._outcome(i, run)
            self.outcomes[i] = outcome
            if not self.sim.settings.fill:  # filling: nothing ever leaves
                run.finish = self.loop.call_at(outcome.end_s, self._finish, i, run.generation)

    def _finish(self, i: int, generation: int) -> None:
        run = self.runs[i]
        if run.generation != generation:
            return
        for key, (node, placement) in run.bound.items():
            self.cluster.finish_pod(NAMESPACE, key.split("/", 1)[1])
            self.usage.change(node, placement, -1)
            self.bound_pods -= 1
        run.bound.clear()
        run.finish = None
        self._point()
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, len(self.sim.jobs))

    def _on_pod(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind != "DELETED" or self._deleting:
            return
        meta = obj.get("metadata") or {}
        i = self.owner.get(f"{meta.get('namespace')}/{meta.get('name')}")
        if i is not None and (obj.get("spec") or {}).get("nodeName"):
            self.loop.call_soon(self._restart, i)  # not inside the evicting call

    def _restart(self, i: int) -> None:
        """A pod of job ``i`` was deleted by the engine (preempted, a gang's timeout): the job
        starts over, as its controller would restart it."""
        run = self.runs[i]
        if run.finish is None and not run.bound and i in self.outcomes:
            return  # finished already
        run.generation += 1
        run.restarts += 1
        if run.finish is not None:
            run.finish.cancel()
            run.finish = None
        started = self.outcomes.pop(i, None)
        if started is not None and run.bound:  # it was running: its work is lost
            job = self.sim.jobs[i]
            self.lost_gpu_s += job.gpus * job.gang_size * (self._now() - started.start_s)
            self.interrupted.append(replace(started, end_s=self._now()))
            self.lost_pods += job.gang_size
        for node, placement in run.bound.values():
            self.usage.change(node, placement, -1)
            self.bound_pods -= 1
        run.bound.clear()
        self._point()
        self._deleting = True
        try:
            for manifest in self.sim.manifests[i]:
                self.cluster.delete_pod(NAMESPACE, manifest["metadata"]["name"])
        finally:
            self._deleting = False
        for manifest in self.sim.manifests[i]:
            self.cluster.create_pod(manifest)

    def _fault(self, fault: Fault) -> None:
        """The hardware changes, the pods on a failed GPU fail (their jobs start over first, so
        the engine's own recovery finds them gone), then the agent reports it."""
        before = self.truth[fault.node]
        if before is None:
            return
        truth = self.truth[fault.node] = with_fault(before, fault)
        for i, run in list(self.runs.items()):
            if not any(
                node == fault.node and fault.gpu in placement.gpus
                for node, placement in run.bound.values()
            ):
                continue
            if fault.kind == "gpu":
                self.failed_jobs += 1
                self._restart(i)
            elif run.finish is not None:
                self._slow(i, run)
        seen = without_health(truth) if self.sim.settings.health_blind else truth
        gpu = seen.gpus[fault.gpu]
        self.seq[fault.node] = seq = self.seq.get(fault.node, 0) + 1
        state = GpuState(
            index=gpu.index,
            uuid=gpu.uuid,
            healthy=gpu.healthy,
            health_reason=gpu.health_reason,
            health=gpu.health,
        )
        self.cluster.inventory.apply_delta(fault.node, seq=seq, gpus=(state,), allocations=None)

    def _slow(self, i: int, run: _Run) -> None:
        """A running job's link degraded: the rest of its run pays the new stretch."""
        old = self.outcomes[i]
        now = self._now()
        new = self._outcome(i, run)
        if new.stretch <= old.stretch or run.finish is None:
            return
        self.slowed_jobs += 1
        end = now + (old.end_s - now) * new.stretch / old.stretch
        run.finish.cancel()
        run.finish = self.loop.call_at(end, self._finish, i, run.generation)
        stretch = (end - old.start_s) / old.job.duration_s if old.job.duration_s else new.stretch
        self.outcomes[i] = replace(
            old, end_s=end, stretch=stretch, degraded_link=True, worst_link=new.worst_link
        )

    def _drop(self, i: int) -> None:
        """Fill mode: job ``i`` failed its first attempt; its pods go, never to be tried again."""
        if i in self.dropped or i in self.outcomes:
            return
        first = self.sim.manifests[i][0]["metadata"]["name"]
        attempt = self.engine.scheduler.last_attempt(f"{NAMESPACE}/{first}")
        self.dropped[i] = attempt.message if attempt is not None else "dropped"
        self._deleting = True
        try:
            for manifest in self.sim.manifests[i]:
                self.cluster.delete_pod(NAMESPACE, manifest["metadata"]["name"])
        finally:
            self._deleting = False

    def _now(self) -> float:
        """Simulated time to the microsecond (a timer fires a hair after its time: clock.py)."""
        return round(self.loop.time(), 6)

    def _point(self) -> None:
        u = self.usage
        self.points.append(UsagePoint(self._now(), u.busy, u.mig, u.fragmentation))

    # --- placement quality -----------------------------------------------------------------------

    def _outcome(self, i: int, run: _Run) -> JobOutcome:
        job = self.sim.jobs[i]
        worst = Link("X")
        multi = best = 0
        degraded = False
        nodes: list[str] = []
        for node, placement in run.bound.values():
            nodes.append(node)
            topology = self.truth[node]
            gpus = placement.gpus
            if len(gpus) < 2 or topology is None:
                continue
            link = worst_effective_link(topology, gpus)  # a degraded NVLink pair is slower
            degraded = degraded or link.rank > worst_link(topology, gpus).rank
            multi += 1
            if link.rank <= best_link_rank(topology, len(gpus)):
                best += 1
            if link.rank > worst.rank:
                worst = link
        where = tuple(dict.fromkeys(nodes))
        spans = span([self.by_name[n].labels for n in where])
        stretch = self.sim.cost.stretch(worst.kind, spans)
        start = self._now()
        return JobOutcome(
            job=job,
            start_s=start,
            end_s=start + job.duration_s * stretch,
            nodes=where,
            worst_link=str(worst) if multi else "",
            multi_gpu_pods=multi,
            best_link_pods=best,
            span=spans,
            stretch=stretch,
            degraded_link=degraded,
            placements=tuple(run.bound.values()),
        )

    # --- the run ---------------------------------------------------------------------------------

    async def run(self) -> RunResult:
        began = time.perf_counter()
        scheduler = self.engine.scheduler
        scheduler.bind_listeners.append(self._on_bind)
        if self.sim.settings.fill:
            scheduler.observer = _DropOnFailure(self)
        unsubscribe = self.cluster.subscribe(self._on_pod)
        try:
            async with self.engine:
                for i, job in enumerate(self.sim.jobs):
                    self.loop.call_at(job.arrival_s, self._submit, i)
                for fault in self.sim.settings.faults:
                    self.loop.call_at(fault.at_s, self._fault, fault)
                await self._until_done()
        finally:
            unsubscribe()
        unplaced: dict[int, str] = {}
        for i, manifests in enumerate(self.sim.manifests):
            if i in self.outcomes:
                continue
            attempt = scheduler.last_attempt(f"{NAMESPACE}/{manifests[0]['metadata']['name']}")
            why = attempt.message if attempt is not None else "never tried"
            unplaced[i] = self.dropped.get(i, why)
        preemptor = self.engine.gangs.preemptor
        return RunResult(
            policy=self.policy.name,
            jobs=self.sim.jobs,
            outcomes=self.outcomes,
            interrupted=tuple(self.interrupted),
            unplaced=unplaced,
            usage=self.points,
            whole_gpus=self.sim.whole_gpus,
            mig_instances=self.sim.mig_instances,
            attempts=scheduler.stats.attempts,
            restarts=sum(r.restarts for r in self.runs.values()),
            lost_gpu_s=self.lost_gpu_s,
            lost_pods=self.lost_pods,
            defrags=preemptor.moves if preemptor is not None else 0,
            moved_pods=preemptor.moved - preemptor.compacted if preemptor is not None else 0,
            compacted_pods=preemptor.compacted if preemptor is not None else 0,
            freed_nodes=preemptor.freed_nodes if preemptor is not None else 0,
            failed_jobs=self.failed_jobs,
            slowed_jobs=self.slowed_jobs,
            simulated_s=self._now(),
            wall_s=time.perf_counter() - began,
        )

    async def _until_done(self) -> None:
        settings = self.sim.settings
        quiet_since: float | None = None
        while True:
            await asyncio.sleep(settings.poll_s)
            if settings.fill and not self.arrivals_left:
                if len(self.outcomes) + len(self.dropped) == len(self.sim.jobs):
                    return
                continue
            if self.arrivals_left or self.bound_pods:
                quiet_since = None
                continue
            now = self._now()
            if len(self.outcomes) == len(self.sim.jobs):
                return
            if quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= settings.settle_s:
                return
