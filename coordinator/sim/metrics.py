"""What one replay measured, and the figures derived from it.

- **JCT** (job completion time): completion − arrival, with the run time stretched by the
  communication-cost model; **queueing delay**: start − arrival. Over placed jobs.
- **Utilisation**: busy whole GPUs / all whole GPUs (and busy / all MIG instances),
  time-weighted over the *arrival window* (first to last arrival: while work keeps coming; the
  drain after the last arrival is measured by the makespan instead), and per time bucket.
- **Fragmentation**: idle whole GPUs on partly used nodes (as ``GET /v1/domains`` counts it),
  time-weighted over the arrival window; as a share of idle GPUs too.
- **Locality**: multi-GPU pods whose worst link is the best class the node's hardware offers for
  that many GPUs; multi-node jobs (gangs) whose pods all sit in one leaf (one node counts);
  the mean stretch of multi-GPU jobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.core.snapshot.podinfo import Placement
from coordinator.sim.trace import Job

__all__ = ["JobOutcome", "RunResult", "Summary", "UsagePoint", "percentile"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    job: Job
    start_s: float
    end_s: float
    nodes: tuple[str, ...]
    worst_link: str  # worst link inside any pod ("NV18", "PIX", …), "" with no multi-GPU pod
    multi_gpu_pods: int  # pods with ≥ 2 whole GPUs
    best_link_pods: int  # of those, on the best class their node offers
    span: str  # node | leaf | spine | cluster
    stretch: float
    #: a pod of the job got GPUs joined by an NVLink the agent judged degraded (docs/health.md)
    degraded_link: bool = False
    placements: tuple[tuple[str, Placement], ...] = ()  # each pod's node and what it holds there

    @property
    def wait_s(self) -> float:
        return self.start_s - self.job.arrival_s

    @property
    def jct_s(self) -> float:
        return self.end_s - self.job.arrival_s


@dataclass(frozen=True, slots=True)
class UsagePoint:
    """Cluster use from ``t`` until the next point."""

    t: float
    busy_gpus: int
    busy_mig: int
    fragmentation: int


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0–100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    policy: str
    jobs: int
    placed: int
    unplaced: int
    jct_mean_s: float
    jct_p50_s: float
    jct_p95_s: float
    wait_mean_s: float
    wait_p95_s: float
    makespan_s: float
    utilisation: float  # whole GPUs, time-weighted
    mig_utilisation: float
    fragmentation_gpus: float  # time-weighted idle GPUs on partly used nodes
    fragmentation_share: float  # … as a share of idle GPUs (time-weighted)
    multi_gpu_pods: int
    best_link_share: float  # of multi-GPU pods
    gangs: int
    gangs_one_leaf_share: float
    gangs_one_spine_share: float
    multi_gpu_stretch: float  # mean stretch of jobs with multi-GPU pods or several pods
    timeline: tuple[float, ...]  # utilisation per time bucket
    attempts: int
    restarts: int
    speed: float  # simulated seconds per wall second

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    policy: str
    jobs: Sequence[Job]
    outcomes: Mapping[int, JobOutcome]  # by job index
    interrupted: Sequence[JobOutcome] = ()  # runs that started over (moved, preempted): end_s when
    unplaced: Mapping[int, str]  # job index → the last reason it did not fit
    usage: Sequence[UsagePoint]
    whole_gpus: int
    mig_instances: int
    attempts: int
    restarts: int = 0  # jobs started over because the engine deleted one of their pods
    lost_gpu_s: float = 0.0  # GPU-seconds run by started jobs that then started over
    lost_pods: int = 0  # pods of started jobs that started over (moved, preempted)
    defrags: int = 0  # defragmentations the engine executed
    moved_pods: int = 0  # pods they moved
    compacted_pods: int = 0  # pods background compaction moved
    freed_nodes: int = 0  # nodes they emptied of a moved pod for the waiting workload
    failed_jobs: int = 0  # jobs whose GPU failed under them (replay faults)
    slowed_jobs: int = 0  # running jobs an NVLink degraded under (replay faults)
    simulated_s: float = 0.0  # simulated time the replay covered
    wall_s: float = 0.0  # wall time it took

    def summary(self, *, buckets: int = 10) -> Summary:
        done = list(self.outcomes.values())
        jct = [o.jct_s for o in done]
        wait = [o.wait_s for o in done]
        start = self.jobs[0].arrival_s if self.jobs else 0.0
        last_end = max((o.end_s for o in done), default=start)
        last_arrival = self.jobs[-1].arrival_s if self.jobs else start
        end = last_arrival if last_arrival > start else last_end
        span = max(end - start, 1e-9)
        busy = mig = frag = frag_share = 0.0
        timeline = [0.0] * buckets
        width = span / buckets
        points = list(self.usage)
        for k, p in enumerate(points):
            t1 = min(points[k + 1].t if k + 1 < len(points) else end, end)
            t0 = max(p.t, start)
            if t1 <= t0:
                continue
            dt = t1 - t0
            busy += p.busy_gpus * dt
            mig += p.busy_mig * dt
            frag += p.fragmentation * dt
            idle = self.whole_gpus - p.busy_gpus
            frag_share += (p.fragmentation / idle if idle > 0 else 0.0) * dt
            # spread this segment over the buckets it covers
            b = int((t0 - start) / width) if width > 0 else 0
            while b < buckets and t0 < t1:
                edge = min(t1, start + (b + 1) * width)
                if self.whole_gpus:
                    timeline[b] += p.busy_gpus / self.whole_gpus * (edge - t0) / width
                t0 = edge
                b += 1
        multi = sum(o.multi_gpu_pods for o in done)
        best = sum(o.best_link_pods for o in done)
        gangs = [o for o in done if o.job.gang_size > 1]
        comm = [o.stretch for o in done if o.multi_gpu_pods or o.job.gang_size > 1]
        return Summary(
            policy=self.policy,
            jobs=len(self.jobs),
            placed=len(done),
            unplaced=len(self.unplaced),
            jct_mean_s=_mean(jct),
            jct_p50_s=percentile(jct, 50),
            jct_p95_s=percentile(jct, 95),
            wait_mean_s=_mean(wait),
            wait_p95_s=percentile(wait, 95),
            makespan_s=last_end - start,
            utilisation=busy / span / self.whole_gpus if self.whole_gpus else 0.0,
            mig_utilisation=mig / span / self.mig_instances if self.mig_instances else 0.0,
            fragmentation_gpus=frag / span,
            fragmentation_share=frag_share / span,
            multi_gpu_pods=multi,
            best_link_share=best / multi if multi else 1.0,
            gangs=len(gangs),
            gangs_one_leaf_share=(
                sum(1 for o in gangs if o.span in ("node", "leaf")) / len(gangs) if gangs else 1.0
            ),
            gangs_one_spine_share=(
                sum(1 for o in gangs if o.span != "cluster") / len(gangs) if gangs else 1.0
            ),
            multi_gpu_stretch=_mean(comm) if comm else 1.0,
            timeline=tuple(round(x, 4) for x in timeline),
            attempts=self.attempts,
            restarts=self.restarts,
            speed=self.simulated_s / self.wall_s if self.wall_s > 0 else 0.0,
        )
