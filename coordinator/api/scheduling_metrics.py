"""The scheduler's event metrics (attempts, latencies, preemption, recovery, topology violations):
Topos's own ``topos_*`` names, modelled on kube-scheduler's, plus each seed system's names when
its compatibility set is on. ``docs/metrics.md`` lists every series and what it means.

:class:`SchedulingMetrics` is the engine's :class:`~coordinator.engine.observer.SchedulingObserver`:
:meth:`attach` puts it on a running scheduler (and on its queue, to learn when each pod was first
seen: the end-to-end latency starts there, as kube-scheduler's SLI does).

An *attempt* is one record of one pod: a decision (its result is known once the bind answers:
``scheduled``, or ``error`` when the bind fails) or a failure (``unschedulable``, including pods
whose spec cannot be scheduled). A gang attempt counts once per member it decides, so successes
never outnumber attempts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from common.podkeys import SCHEDULER_NAME
from coordinator.api.window_summary import WindowSummary
from coordinator.core.framework.profiles import scheduler_name_of
from coordinator.core.queue import QueuedPod
from coordinator.engine.loop import Scheduler
from coordinator.engine.observer import TRIGGERS, Outcome, SchedulingObserver, Trigger

__all__ = ["METRIC_SETS", "MISMATCH", "RESULTS", "SchedulingMetrics", "exponential"]

#: The seed systems' metric names, switchable with the config's ``metrics.compat``.
METRIC_SETS: Final = ("neuronetes", "topology-scheduler")
#: The results of an attempt, as kube-scheduler's ``scheduler_schedule_attempts_total``.
RESULTS: Final = ("scheduled", "unschedulable", "error")
#: The topology-violation reason the device-plugin mismatch check reports.
MISMATCH: Final = "gpu-assignment-mismatch"


def exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``count`` bucket bounds from ``start``, each ``factor`` times the last (Prometheus's
    ``ExponentialBuckets``)."""
    return tuple(start * factor**i for i in range(count))


ATTEMPT_BUCKETS: Final = exponential(0.001, 2, 15)  # 1 ms … ~16 s
SLI_BUCKETS: Final = exponential(0.01, 2, 20)  # 10 ms … ~88 min
ATTEMPTS_BUCKETS: Final = exponential(1, 2, 5)  # 1 … 16 attempts
VICTIM_BUCKETS: Final = exponential(1, 2, 7)  # 1 … 64 victims
RECOVERY_BUCKETS: Final = (1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class SchedulingMetrics(SchedulingObserver):
    """Event-loop only. Registers its collectors on ``registry``; ``compat`` names the seed sets
    to export besides the ``topos_*`` names; ``clock`` must be the scheduler's (monotonic)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        compat: Collection[str] = METRIC_SETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unknown = set(compat) - set(METRIC_SETS)
        if unknown:
            raise ValueError(f"unknown metric set(s): {', '.join(sorted(unknown))}")
        self._clock = clock
        self._decided: dict[str, float] = {}  # uid → when the attempt that placed it began
        self._seen: dict[str, float] = {}  # uid → when the queue first held it
        self._attached: Scheduler | None = None
        # Each label set's series, looked up once (``labels()`` takes a lock and builds a key at
        # every call: twice per pod bound).
        self._by_result: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._by_tries: dict[int, Histogram] = {}
        r = registry
        self.attempts = Counter(
            "topos_schedule_attempts",
            "Scheduling attempts by result: scheduled (bound), unschedulable (no node fits, or "
            "the pod's spec cannot be scheduled), error (the bind failed)",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_seconds = Histogram(
            "topos_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency (decision + bind), by result",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.sli_seconds = Histogram(
            "topos_pod_scheduling_sli_duration_seconds",
            "End-to-end latency of a bound pod, from the moment the scheduler first saw it, "
            "over all its attempts",
            ["attempts"],
            buckets=SLI_BUCKETS,
            registry=r,
        )
        self.pod_attempts = Histogram(
            "topos_pod_scheduling_attempts",
            "Attempts it took to bind a pod",
            buckets=ATTEMPTS_BUCKETS,
            registry=r,
        )
        self.preemption_attempts = Counter(
            "topos_preemption_attempts", "Preemption evaluations for pods or gangs", registry=r
        )
        self.preemption_victims = Histogram(
            "topos_preemption_victims",
            "Victims chosen by one preemption",
            buckets=VICTIM_BUCKETS,
            registry=r,
        )
        self.defrag_attempts = Counter(
            "topos_defragmentation_attempts",
            "Moves of movable pods planned for, by trigger: waiting (a pod or gang that does "
            "not fit), gather (a gang split over NVLink cliques), compaction (background)",
            ["trigger"],
            registry=r,
        )
        self.defrag_moves = Counter(
            "topos_defragmentation_moves",
            "Plans of moves carried out, by trigger",
            ["trigger"],
            registry=r,
        )
        self.defrag_moved_pods = Counter(
            "topos_defragmentation_moved_pods",
            "Movable pods evicted by those plans, by trigger",
            ["trigger"],
            registry=r,
        )
        for trigger in TRIGGERS:  # exported at 0 from the start
            self.defrag_attempts.labels(trigger)
            self.defrag_moves.labels(trigger)
            self.defrag_moved_pods.labels(trigger)
        self.recovery_seconds = Histogram(
            "topos_recovery_duration_seconds",
            "Failure noticed → every member of the gang bound again",
            buckets=RECOVERY_BUCKETS,
            registry=r,
        )
        self.violations = Counter(
            "topos_topology_violations",
            "Placements whose topology promise does not hold, by reason",
            ["reason"],
            registry=r,
        )
        self.violations.labels(MISMATCH)  # exported at 0 from the start
        for result in RESULTS:  # every result's series exists from the start: rate() works
            self.attempts.labels(result, SCHEDULER_NAME)
            self.attempt_seconds.labels(result, SCHEDULER_NAME)
        self._neuronetes = _Neuronetes(r) if "neuronetes" in compat else None
        self._topology = _TopologyScheduler(r) if "topology-scheduler" in compat else None

    # --- wiring ----------------------------------------------------------------------------------

    def attach(self, scheduler: Scheduler) -> None:
        """Observe ``scheduler`` (and its queue) until :meth:`detach`."""
        self._attached = scheduler
        scheduler.observer = self
        scheduler.queue.listeners.append(self._queued)
        now = self._clock()
        for entry in scheduler.queue.entries():
            self._seen.setdefault(entry.uid, now)

    def detach(self) -> None:
        scheduler, self._attached = self._attached, None
        if scheduler is None:
            return
        scheduler.observer = SchedulingObserver()
        if self._queued in scheduler.queue.listeners:
            scheduler.queue.listeners.remove(self._queued)
        self._decided.clear()
        self._seen.clear()

    def _queued(self, entry: QueuedPod, present: bool) -> None:
        if present:
            self._seen.setdefault(entry.uid, self._clock())
        elif entry.uid not in self._decided:
            # A pod with a decision may leave the queue (its binding seen) before the bind's
            # answer reaches the loop: the bind's record drops what is kept for it.
            self._seen.pop(entry.uid, None)

    # --- the observer ----------------------------------------------------------------------------

    def attempt(
        self, entry: QueuedPod, outcome: Outcome, *, began: float | None, now: float
    ) -> None:
        if outcome == "binding":
            if began is not None:
                self._decided[entry.uid] = began
            return
        if outcome in ("unschedulable", "invalid"):
            if began is not None:  # not a gang parked by a timeout, outside any attempt
                self._counted("unschedulable", now - began, entry)
            return
        started = self._decided.pop(entry.uid, None)
        if outcome == "bind-failed":
            queue = self._attached.queue if self._attached is not None else None
            if queue is None or entry.uid not in queue:
                self._seen.pop(entry.uid, None)  # gone: it will not be tried again
            if started is not None:
                self._counted("error", now - started, entry)
            return
        first = self._seen.pop(entry.uid, None)
        if started is None:
            return  # decided before this observer was attached
        self._counted("scheduled", now - started, entry)
        tries = entry.attempts + 1
        self.pod_attempts.observe(tries)
        if first is not None:
            series = self._by_tries.get(tries)
            if series is None:
                series = self._by_tries[tries] = self.sli_seconds.labels(str(tries))
            series.observe(max(0.0, now - first))

    def _counted(self, result: str, seconds: float, entry: QueuedPod) -> None:
        seconds = max(0.0, seconds)
        # The profile that decided: the one the pod's schedulerName names (kube's label).
        profile = scheduler_name_of(entry.obj) or SCHEDULER_NAME
        series = self._by_result.get((result, profile))
        if series is None:
            series = self._by_result[result, profile] = (
                self.attempts.labels(result, profile),
                self.attempt_seconds.labels(result, profile),
            )
        series[0].inc()
        series[1].observe(seconds)
        if self._neuronetes is not None:
            self._neuronetes.attempted(result, seconds)
        if self._topology is not None:
            self._topology.attempted(result, seconds)

    def preemption_attempted(self) -> None:
        self.preemption_attempts.inc()

    def preempted(self, victims: int) -> None:
        self.preemption_victims.observe(victims)

    def defragmentation_attempted(self, trigger: Trigger) -> None:
        self.defrag_attempts.labels(trigger).inc()

    def moved(self, trigger: Trigger, pods: int) -> None:
        self.defrag_moves.labels(trigger).inc()
        self.defrag_moved_pods.labels(trigger).inc(pods)

    def recovered(self, seconds: float) -> None:
        self.recovery_seconds.observe(seconds)
        if self._topology is not None:
            self._topology.recovered(seconds)

    def topology_violation(self, reason: str) -> None:
        self.violations.labels(reason).inc()
        if self._neuronetes is not None:
            self._neuronetes.violations.inc()


class _Neuronetes:
    """NeuroNetes' scheduler metrics (seed 000): success rate is ``rate(success) /
    rate(attempts)``; the latency is a summary, so its bare name graphs quantiles."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.latency = WindowSummary(
            "neuronetes_scheduler_latency_seconds",
            "Scheduling attempt latency (every result); quantiles of the last 1024 attempts",
            registry=r,
        )
        self.attempts = Counter(
            "neuronetes_scheduler_attempts", "Scheduling attempts (every result)", registry=r
        )
        self.success = Counter(
            "neuronetes_scheduler_success", "Scheduling attempts that bound the pod", registry=r
        )
        self.violations = Counter(
            "neuronetes_scheduler_topology_violations",
            "Placements whose topology promise does not hold",
            registry=r,
        )

    def attempted(self, result: str, seconds: float) -> None:
        self.latency.observe(seconds)
        self.attempts.inc()
        if result == "scheduled":
            self.success.inc()


class _TopologyScheduler:
    """The topology-aware scheduler's metrics (seeds 003/004)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.latency = Histogram(
            "topology_scheduler_latency_seconds",
            "Scheduling attempt latency (every result)",
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.placement = Histogram(
            "topology_scheduler_placement_duration_seconds",
            "Attempt began → pod bound, for pods placed",
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "topology_placement_decisions",
            "Placement decisions by result: placed, unschedulable, error (bind failed)",
            ["result"],
            registry=r,
        )
        for result in ("placed", "unschedulable", "error"):
            self.decisions.labels(result)
        self.recovery = Histogram(
            "topology_scheduler_recovery_duration_seconds",
            "Failure noticed → every member of the gang bound again",
            buckets=RECOVERY_BUCKETS,
            registry=r,
        )
        self.recovery_004 = Histogram(
            "topology_recovery_duration_seconds",
            "Failure noticed → every member of the gang bound again",
            buckets=RECOVERY_BUCKETS,
            registry=r,
        )

    def attempted(self, result: str, seconds: float) -> None:
        self.latency.observe(seconds)
        self.decisions.labels("placed" if result == "scheduled" else result).inc()
        if result == "scheduled":
            self.placement.observe(seconds)

    def recovered(self, seconds: float) -> None:
        self.recovery.observe(seconds)
        self.recovery_004.observe(seconds)
