"""Predicted against actual start times on trace replays (``coordinator.forecast``).

Each trace is replayed by the engine on a simulated clock (``coordinator.sim``). As each job
arrives, its pods just created, the replay stands still while the prediction copies what the
engine knows — nodes, bound pods, the pending queue in order (``coordinator.forecast.live
.copy_of``, the live forecaster's copy) — and runs the engine forward on that copy
(``predict_starts``) to the moment the job's last pod binds. The replay then goes on, and the
job's real start (the first time all its pods were bound: a job preempted later restarts, and
the prediction was for its first start) is compared with the prediction, for every job that
waited (started ≥ 1 s after it arrived).

How long pods run is known to the prediction in one of three ways, one replay each:

``known``    every started job's real end, and each pending job's run time (what a
             ``topos.io/expected-duration`` or a Job's deadline says, exactly);
``learned``  the median run time of the jobs of the same shape (GPUs per pod, pods, MIG profile,
             NUMA policy) that finished before (``RuntimeHistory``'s rule); none finished: unknown;
``unknown``  nothing: running pods never end in the prediction.

The communication-cost model is neutral (every factor 1.0) so a job runs exactly its trace
duration: "known" is then exact, and the error is the engine's own (queue order, backoff, gang
timeouts, preemption, and what arrives later and goes first). Traces: the synthetic generator's
(shaped like Philly/Alibaba PAI/Helios: ``coordinator/sim/tracegen.py``) and a gang-heavy
variant (40 % multi-node gangs), on 16 DGX nodes at 1.2× offered load.

Why a prediction missed (``--explain``, known run times only): each job whose error is over
10 % of its wait is replayed again with the trace cut after it (no later arrivals). If it then
starts when predicted (within 10 % of its wait), the miss is **later arrivals** (jobs submitted
after the prediction that went first: higher priority, backfill into room it could not use,
preemption); if not, it is the **engine state** the copy does not carry — each pending pod's
queue backoff and each gang's timeout phase (the copy queues every pending pod fresh, in
priority and age order). Example from
the gang-heavy trace: two equal-priority 4 × 8-GPU gangs wait, the older one last failed 9 s
before room frees, so it sits out the last second of its 10 s backoff and the younger one takes
the room; the forward run, with both fresh, gives it to the older one.

Run: ``.venv/bin/python -m benchmarks.predict_accuracy [--jobs 80] [--load 1.2] [--seed 3]
[--traces synthetic,gang-heavy] [--modes known,learned,unknown] [--explain]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent.devices import discover_profile
from common.model import NodeTopology
from coordinator.engine.binder import BindJob
from coordinator.engine.ports import ClusterError
from coordinator.forecast.live import copy_of
from coordinator.forecast.predict import predict_starts
from coordinator.forecast.runtimes import Runtime
from coordinator.inventory.state import BoundPod
from coordinator.sim import (
    Job,
    Simulator,
    build_nodes,
    cluster_shape,
    generate,
    make_policy,
    parse_cluster,
)
from coordinator.sim.costmodel import DEFAULT_LINK, DEFAULT_NETWORK, CostModel
from coordinator.sim.replay import Arrival

CLUSTER = """
name: predict-16
layout: {nodesPerLeaf: 4, leavesPerSpine: 2}
nodes:
  - {profile: dgx-h100, count: 8}
  - {profile: dgx-a100, count: 8}
"""
MODES = ("known", "learned", "unknown")
NEUTRAL = CostModel(
    link=dict.fromkeys(DEFAULT_LINK, 1.0), network=dict.fromkeys(DEFAULT_NETWORK, 1.0)
)
HORIZON_S = 3 * 86_400.0
Shape = tuple[int, int, str, str]


def topology_of(profile: str) -> NodeTopology:
    return discover_profile(profile, hostname=profile)


def _shape(job: Job) -> Shape:
    return (job.gpus, job.gang_size, job.mig_profile, job.numa_policy)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclasses.dataclass
class Accuracy:
    trace: str
    mode: str
    waited: int = 0
    predicted: int = 0
    abs_errors: list[float] = dataclasses.field(default_factory=list)
    rel_errors: list[float] = dataclasses.field(default_factory=list)
    predict_s: list[float] = dataclasses.field(default_factory=list)
    restarts: int = 0
    #: ``--explain``: jobs missed by over 10 % of their wait, by cause
    later_arrivals: list[int] = dataclasses.field(default_factory=list)
    engine_state: list[int] = dataclasses.field(default_factory=list)

    def row(self) -> str:
        if not self.abs_errors:
            return (
                f"{self.trace:<11} {self.mode:<8} {self.waited:>6} {self.predicted:>9}"
                "          -          -        -        -         -"
            )
        return (
            f"{self.trace:<11} {self.mode:<8} {self.waited:>6} {self.predicted:>9} "
            f"{statistics.median(self.abs_errors):>9.0f}s {_quantile(self.abs_errors, 0.9):>9.0f}s "
            f"{100 * statistics.median(self.rel_errors):>7.1f}% "
            f"{100 * _quantile(self.rel_errors, 0.9):>7.1f}% "
            f"{1000 * statistics.median(self.predict_s):>7.0f}ms"
        )


HEADER = (
    f"{'trace':<11} {'runtimes':<8} {'waited':>6} {'predicted':>9} "
    f"{'median|e|':>10} {'p90|e|':>10} {'med e/w':>8} {'p90 e/w':>8} {'predict':>9}"
)


class Predictor:
    """Predicts each arriving job's start, knowing run times as ``mode`` says."""

    def __init__(self, jobs: Sequence[Job], mode: str) -> None:
        self.jobs = jobs
        self.mode = mode
        self.predictions: dict[int, float | None] = {}
        self.took: list[float] = []
        self.started: dict[int, float] = {}  # job → start, once its pods all bound
        self.finished: dict[Shape, list[float]] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._pods: dict[int, list[str]] = {}
        self.first_start: dict[int, float] = {}  # job → when its pods were first all bound
        self._bound: dict[int, set[str]] = {}

    def _watch(self, arrival: Arrival) -> None:
        """A job's first start (a preempted job restarts later: its prediction was for this)."""
        loop = asyncio.get_running_loop()
        owner = arrival.owner

        def bound(job: BindJob, exc: ClusterError | None) -> None:
            i = owner.get(job.request.key)
            if exc is not None or i is None or i in self.first_start:
                return
            pods = self._bound.setdefault(i, set())
            pods.add(job.request.key)
            if len(pods) == len(self._pods[i]):
                self.first_start[i] = round(loop.time(), 6)

        arrival.engine.scheduler.bind_listeners.append(bound)

    def learned(self, job: Job) -> float | None:
        runs = self.finished.get(_shape(job))
        return statistics.median(runs[-20:]) if runs else None

    def __call__(self, arrival: Arrival) -> None:
        now = arrival.now
        if not self._pods:
            for key, i in arrival.owner.items():
                self._pods.setdefault(i, []).append(key)
            self._watch(arrival)
        for key, end in arrival.ends.items():  # a started job: when it started (cost neutral)
            i = arrival.owner[key]
            self.started.setdefault(i, end - self.jobs[i].duration_s)
        self.finished.clear()
        for i, start in self.started.items():
            job = self.jobs[i]
            if start + job.duration_s <= now:
                self.finished.setdefault(_shape(job), []).append(job.duration_s)

        def left(pod: BoundPod, obj: Mapping[str, Any]) -> Runtime:
            key = f"{pod.namespace}/{pod.name}"
            i = arrival.owner.get(key)
            if i is None or self.mode == "unknown":
                return Runtime(None, "unknown")
            job = self.jobs[i]
            if self.mode == "known":
                end = arrival.ends.get(key)
                return Runtime(job.duration_s if end is None else max(0.0, end - now), "annotation")
            runs = self.learned(job)
            if runs is None:
                return Runtime(None, "unknown")
            elapsed = now - self.started.get(i, now)
            return Runtime(max(0.0, runs - elapsed), "learned")

        def duration(obj: Mapping[str, Any]) -> Runtime:
            meta = obj.get("metadata") or {}
            i = arrival.owner.get(f"{meta.get('namespace')}/{meta.get('name')}")
            if i is None or self.mode == "unknown":
                return Runtime(None, "unknown")
            job = self.jobs[i]
            if self.mode == "known":
                return Runtime(job.duration_s, "annotation")
            runs = self.learned(job)
            return Runtime(runs, "learned") if runs is not None else Runtime(None, "unknown")

        state = copy_of(
            arrival.engine.scheduler,
            started=lambda pod: now,
            left=left,
            duration=duration,
        )
        targets = self._pods[arrival.job]
        began = time.perf_counter()
        found = self._pool.submit(
            predict_starts,
            state,
            targets,
            horizon_s=HORIZON_S,
            framework=make_policy("topos").framework,
        ).result()
        self.took.append(time.perf_counter() - began)
        starts = [found[k].starts_in_s for k in targets]
        self.predictions[arrival.job] = (
            None if any(s is None for s in starts) else now + max(s or 0.0 for s in starts)
        )


def alone_start(sim: Simulator, i: int) -> float | None:
    """Job ``i``'s first start in a replay of the trace cut after it (nothing arrives later)."""
    cut = Simulator(sim.nodes, sim.jobs[: i + 1], cost_model=sim.cost, settings=sim.settings)
    first: dict[str, float] = {}

    def watch(arrival: Arrival) -> None:
        if arrival.job != i:
            return
        loop = asyncio.get_running_loop()
        pods = {k for k, j in arrival.owner.items() if j == i}
        bound: set[str] = set()

        def on_bind(job: BindJob, exc: ClusterError | None) -> None:
            if exc is None and job.request.key in pods and "start" not in first:
                bound.add(job.request.key)
                if bound == pods:
                    first["start"] = round(loop.time(), 6)

        arrival.engine.scheduler.bind_listeners.append(on_bind)

    cut.run(make_policy("topos"), on_arrival=watch)
    return first.get("start")


def measure(trace: str, sim: Simulator, mode: str, *, explain: bool = False) -> Accuracy:
    predictor = Predictor(sim.jobs, mode)
    result = sim.run(make_policy("topos"), on_arrival=predictor)
    out = Accuracy(trace, mode, predict_s=predictor.took)
    out.restarts = result.restarts
    for i, started in sorted(predictor.first_start.items()):
        wait = started - sim.jobs[i].arrival_s
        if wait < 1.0:
            continue
        out.waited += 1
        predicted = predictor.predictions.get(i)
        if predicted is None:
            continue
        out.predicted += 1
        error = abs(predicted - started)
        out.abs_errors.append(error)
        out.rel_errors.append(error / wait)
        if explain and mode == "known" and error > 0.1 * wait:
            alone = alone_start(sim, i)
            if alone is not None and abs(alone - predicted) <= 0.1 * wait:
                out.later_arrivals.append(i)
            else:
                out.engine_state.append(i)
            print(
                f"  {trace} job {i} ({_describe(sim.jobs[i])}): waited {wait:.0f} s, predicted "
                f"{predicted - sim.jobs[i].arrival_s:.0f} s, alone (no later arrivals) "
                f"{'-' if alone is None else f'{alone - sim.jobs[i].arrival_s:.0f} s'}",
                flush=True,
            )
    return out


def _describe(job: Job) -> str:
    return f"{job.gang_size} × {job.gpus} GPU, priority {job.priority}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=80)
    parser.add_argument("--load", type=float, default=1.2)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES)
    )
    parser.add_argument("--traces", default="synthetic,gang-heavy")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="replay each job missed by over 10 %% of its wait without later arrivals: why",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"--modes: unknown runtime source {unknown[0]!r} (one of {', '.join(MODES)})")
    nodes = build_nodes(parse_cluster(CLUSTER), topology_of)
    base = cluster_shape(nodes, jobs=args.jobs, load=args.load, seed=args.seed)
    traces = {
        "synthetic": base,
        "gang-heavy": dataclasses.replace(base, gang_share=0.4, mig_share=0.0),
    }
    chosen = [t for t in args.traces.split(",") if t]
    missing = [t for t in chosen if t not in traces]
    if missing:
        parser.error(f"--traces: unknown trace {missing[0]!r} (one of {', '.join(traces)})")
    print(HEADER, flush=True)
    for name in chosen:
        sim = Simulator(nodes, generate(traces[name]), cost_model=NEUTRAL)
        for mode in modes:
            acc = measure(name, sim, mode, explain=args.explain)
            print(acc.row(), flush=True)
            if args.explain and mode == "known":
                print(
                    f"  missed by > 10 % of the wait: {len(acc.later_arrivals)} by later "
                    f"arrivals, {len(acc.engine_state)} by engine state not copied "
                    f"(jobs {acc.engine_state})",
                    flush=True,
                )
    print(
        "|e|: absolute error of the predicted start; e/w: that error over the job's real wait; "
        "predicted: jobs that waited and got a start within the horizon"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
