"""The scheduling queue's timing rules not covered in test_runtime_memory.py: the flush interval
that retries a parked pod anyway, and not losing a cluster change that happens while a pod's
attempt is still being decided."""

from __future__ import annotations

from coordinator.core.queue import QueueSettings, SchedulingQueue
from tests.support.clock import ManualClock
from tests.support.pods import gpu_pod


def make_queue(clock: ManualClock) -> SchedulingQueue:
    return SchedulingQueue(
        QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0, unschedulable_flush_s=60.0),
        clock=clock,
    )


def test_an_unschedulable_pod_is_retried_after_the_flush_interval_anyway() -> None:
    clock = ManualClock()
    q = make_queue(clock)
    q.add(gpu_pod("a", 1, namespace="ns", uid="uid-a"))
    attempt = q.pop()
    assert attempt is not None
    q.failed(attempt)
    clock.now += 59
    assert q.pop() is None
    clock.now += 2
    assert q.pop() is not None


def test_a_cluster_change_during_the_attempt_is_not_lost() -> None:
    """Room frees up while the pod's (failing) attempt runs: the pod must come back after its
    backoff, not sit out the 60 s flush interval."""
    clock = ManualClock()
    q = make_queue(clock)
    q.add(gpu_pod("a", 1, namespace="ns", uid="uid-a"))
    attempt = q.pop()
    assert attempt is not None
    q.cluster_changed()  # e.g. another job finished while this attempt was being decided
    q.failed(attempt, message="0/1 nodes are available")
    assert q.pop() is None  # still backing off
    clock.now += 1.0
    again = q.pop()
    assert again is not None
    assert again.key == "ns/a"


def test_a_change_for_other_pods_does_not_touch_this_attempt() -> None:
    clock = ManualClock()
    q = make_queue(clock)
    q.add(gpu_pod("a", 1, namespace="ns", uid="uid-a"))
    attempt = q.pop()
    assert attempt is not None
    q.cluster_changed(only=lambda p: p.key != "ns/a")
    q.failed(attempt)
    clock.now += 5
    assert q.pop() is None  # parked as unschedulable, as before
