"""What the running scheduler tells an observer (the metrics: ``api/scheduling_metrics.py``).

The engine calls these at the moments they happen; the base class ignores them all, so a
scheduler without metrics (tests, the simulator) pays nothing. Observers must be quick and must
never raise: they run inside the scheduling loop.

- :meth:`~SchedulingObserver.attempt` — every attempt's record (the per-pod path and the gang
  step alike): ``binding`` (a decision, its bind under way), ``bound``, ``bind-failed``,
  ``unschedulable`` or ``invalid``. ``began`` is when the scheduling attempt that produced the
  record started (``None`` for records written outside an attempt, e.g. a gang timing out);
  ``now`` is the same clock.
- :meth:`~SchedulingObserver.preemption_attempted` / :meth:`~SchedulingObserver.preempted` —
  preemption considered for a pod or gang, and carried out with that many victims.
- :meth:`~SchedulingObserver.defragmentation_attempted` / :meth:`~SchedulingObserver.moved` —
  moves of movable pods considered, and carried out moving that many pods, for a
  :data:`Trigger`: ``waiting`` (a pod or gang that does not fit, preemption having found
  nothing), ``gather`` (a gang the planner would split over NVLink cliques — not a preemption:
  it could run), ``compaction`` (background).
- :meth:`~SchedulingObserver.recovered` — a gang running again after a failure, in seconds.
- :meth:`~SchedulingObserver.topology_violation` — a pod runs somewhere its topology promise
  does not hold (e.g. the device plugin gave it other GPUs than the ones chosen).
"""

from __future__ import annotations

from typing import Literal

from coordinator.core.queue import QueuedPod

__all__ = ["TRIGGERS", "Outcome", "SchedulingObserver", "Trigger"]

Outcome = Literal["binding", "bound", "bind-failed", "unschedulable", "invalid"]
Trigger = Literal["waiting", "gather", "compaction"]
TRIGGERS: tuple[Trigger, ...] = ("waiting", "gather", "compaction")


class SchedulingObserver:
    """Ignores everything; subclass and override what you count."""

    def attempt(
        self, entry: QueuedPod, outcome: Outcome, *, began: float | None, now: float
    ) -> None:
        """One attempt's record for ``entry`` (see the module docstring)."""

    def preemption_attempted(self) -> None:
        """Preemption was considered for a pod or gang that does not fit."""

    def preempted(self, victims: int) -> None:
        """Preemption chose ``victims`` pods to evict for one pod or gang."""

    def defragmentation_attempted(self, trigger: Trigger) -> None:
        """Moves were planned for (see the module docstring for ``trigger``)."""

    def moved(self, trigger: Trigger, pods: int) -> None:
        """One plan of moves was carried out, evicting ``pods`` movable pods."""

    def recovered(self, seconds: float) -> None:
        """A gang runs again ``seconds`` after its failure was noticed."""

    def topology_violation(self, reason: str) -> None:
        """A placement broke its topology promise for ``reason`` (a short slug)."""
