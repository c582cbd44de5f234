"""The scheduling queue's timing rules not covered in test_runtime_memory.py: the flush interval
that retries a parked pod anyway, and not losing a cluster change that happens while a pod's
attempt is still being decided; the PreEnqueue gate; which backoff pod is tried early when
nothing else is ready (kube's SchedulerPopFromBackoffQ), and which never is (after an error)."""

from __future__ import annotations

from coordinator.core.queue import QueuedPod, QueueSettings, SchedulingQueue
from devcluster.pods import gpu_pod
from tests.support.clock import ManualClock


def make_queue(clock: ManualClock) -> SchedulingQueue:
    return SchedulingQueue(
        QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0, unschedulable_flush_s=60.0),
        clock=clock,
    )


def trying_a() -> tuple[ManualClock, SchedulingQueue, QueuedPod]:
    """A queue on a manual clock whose one pod, ns/a, has just been popped."""
    clock = ManualClock()
    q = make_queue(clock)
    q.add(gpu_pod("a", 1, namespace="ns", uid="uid-a"))
    attempt = q.pop()
    assert attempt is not None
    return clock, q, attempt


def test_an_unschedulable_pod_is_retried_after_the_flush_interval_anyway() -> None:
    clock, q, attempt = trying_a()
    q.failed(attempt)
    clock.now += 59
    assert q.pop() is None
    clock.now += 2
    assert q.pop() is not None


def test_a_cluster_change_during_the_attempt_is_not_lost() -> None:
    """Room frees up while the pod's (failing) attempt runs: the pod must come back (at once,
    nothing else waiting: kube's SchedulerPopFromBackoffQ), not sit out the 60 s flush."""
    _, q, attempt = trying_a()
    q.cluster_changed()  # e.g. another job finished while this attempt was being decided
    q.failed(attempt, message="0/1 nodes are available")
    again = q.pop()
    assert again is not None
    assert again.key == "ns/a"


def test_a_change_for_other_pods_does_not_touch_this_attempt() -> None:
    clock, q, attempt = trying_a()
    q.cluster_changed(only=lambda p: p.key != "ns/a")
    q.failed(attempt)
    clock.now += 5
    assert q.pop() is None  # parked as unschedulable, as before


def test_a_gang_attempt_answered_late_still_sees_room_freed_after_it_began() -> None:
    """A gang's binds answer long after its attempt began, and other pods were popped meanwhile:
    members parked by that late failure retry after their backoff when room was freed after the
    attempt began (the attempt's ``basis``), instead of sitting out the 60 s flush."""
    clock = ManualClock()
    q = make_queue(clock)
    for name in ("g-0", "g-1"):
        q.add(gpu_pod(name, 8, namespace="ns", uid=f"uid-{name}"))
    first = q.pop()
    sibling = q.pop()
    assert first is not None
    assert sibling is not None
    basis = q.changes  # the gang's attempt begins
    q.cluster_changed()  # room freed 0.1 s later
    q.add(gpu_pod("lone", 1, namespace="ns", uid="uid-lone"))
    lone = q.pop()  # another pod's attempt: the queue's own basis moves on
    assert lone is not None
    q.done(lone)
    for member in (first, sibling):  # the gang lost its race; its members wait again
        q.failed(member, message="pod group g could not bind", basis=basis)
    clock.now += 1.0
    retried = {p.key for p in (q.pop(), q.pop()) if p is not None}
    assert retried == {"ns/g-0", "ns/g-1"}
    # Without a change since its attempt began, a failure parks the member as before.
    for name in ("ns/g-0", "ns/g-1"):
        member = q.named(name)
        assert member is not None
        q.failed(member, basis=q.changes)
    clock.now += 30
    assert q.pop() is None


def test_a_pod_gated_on_its_claim_is_tried_at_once_when_the_claim_appears() -> None:
    """Waiting for kube-controller-manager to create its claim is no failed attempt: the pod's
    status naming the claim sends it back without a backoff (a short job would miss it)."""
    clock = ManualClock()
    q = make_queue(clock)
    obj = gpu_pod("a", 0, namespace="ns", uid="uid-a")
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus-2"}]
    q.add(obj)
    attempt = q.pop()
    assert attempt is not None
    q.failed(attempt, message="waiting for resource claim gpus", gated=True)
    assert q.pop() is None  # parked until something changes
    created = {
        **obj,
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "a-gpus-x"}]},
    }
    q.add(created)
    again = q.pop()
    assert again is not None
    assert again.request.claims[0].resolved_name == "a-gpus-x"  # type: ignore[union-attr]
    # an ordinary failure still backs off: a pod arriving meanwhile goes first
    q.failed(again, message="0/1 nodes are available")
    q.cluster_changed()
    q.add(gpu_pod("later", 0, namespace="ns", uid="uid-later"))
    assert [e.key for e in iter(q.pop, None)] == ["ns/later", "ns/a"]


def test_a_change_sends_back_only_the_pods_parked_for_want_of_room() -> None:
    """Bound pods, pods in flight, pods refused for their own spec and pods already sent back
    stay where they are; a pod parked, sent back and parked again goes back once."""
    clock = ManualClock()
    q = make_queue(clock)
    for name in ("parked", "twice", "bad-spec", "bound", "flying"):
        q.add(gpu_pod(name, 1, namespace="ns", uid=f"uid-{name}"))
    popped = {e.key: e for e in (q.pop() for _ in range(5)) if e is not None}
    q.failed(popped["ns/parked"])
    q.failed(popped["ns/twice"])
    q.failed(popped["ns/bad-spec"], spec_error=True)
    q.done(popped["ns/bound"])
    assert q.cluster_changed(only=lambda p: p.key == "ns/twice") == 1
    clock.now += 1.0
    again = q.pop()
    assert again is not None
    assert again.key == "ns/twice"
    q.failed(again)  # parked again: two flush entries, one of them current
    assert q.cluster_changed() == 2  # "parked" and "twice", once each
    assert q.cluster_changed() == 0  # nothing is parked now
    clock.now += 8.0
    back = sorted(e.key for e in iter(q.pop, None))
    assert back == ["ns/parked", "ns/twice"]
    assert q.entry("uid-flying") is not None
    assert q.entry("uid-flying").where == "in_flight"  # type: ignore[union-attr]


def test_a_list_of_one_profiles_pods_leaves_the_other_profiles_pods_queued() -> None:
    """One pending watch per profile (a field selector names one schedulerName): a list from
    the AgentPool profile's watch, empty, must not empty the queue of the default profile's
    pods — it did, and pods created before the coordinator started were never tried."""
    q = make_queue(ManualClock())
    mine = gpu_pod("mine", 1, namespace="ns", uid="uid-mine")
    pool = gpu_pod("pool", 1, namespace="ns", uid="uid-pool")
    pool["spec"]["schedulerName"] = "topos-agentpools"
    q.replace([mine], scheduler_name="topos")
    q.replace([pool], scheduler_name="topos-agentpools")
    q.replace([], scheduler_name="topos-agentpools")
    assert q.entry("uid-mine") is not None
    assert q.entry("uid-pool") is None  # its own profile's list no longer has it
    q.replace([])  # a list of every pending pod still replaces them all
    assert q.entry("uid-mine") is None


def test_a_pod_tried_thousands_of_times_still_backs_off_at_most_the_maximum() -> None:
    """A gang that waits all day is retried thousands of times: its backoff stays the maximum
    (doubling the initial backoff that often once overflowed and stopped the scheduler)."""
    clock = ManualClock()
    q = make_queue(clock)
    q.add(gpu_pod("a", 1, namespace="ns", uid="uid-a"))
    for _ in range(2000):
        attempt = q.pop()
        assert attempt is not None
        q.retry(attempt)
        clock.now += 8.0
    attempt = q.pop()
    assert attempt is not None
    assert attempt.attempts == 2000
    q.retry(attempt)
    clock.now += 7.9
    assert q.pop() is None
    clock.now += 0.2
    assert q.pop() is not None


def test_a_gated_pod_is_never_popped_and_comes_back_without_backoff_on_a_claim_change() -> None:
    """PreEnqueue: a pod the gate holds back is parked with no attempt counted; a change for
    pods waiting on a claim sends it back at once, and it is popped when the gate lets it."""
    clock = ManualClock()
    q = make_queue(clock)
    missing = {"ns/a"}
    q.gate = lambda pod: (
        "waiting for resource claim c to be created" if pod.key in missing else None
    )
    q.add(gpu_pod("a", 1, namespace="ns", uid="uid-a"))
    q.add(gpu_pod("b", 1, namespace="ns", uid="uid-b"))
    first = q.pop()
    assert first is not None
    assert first.key == "ns/b"
    assert q.pop() is None
    parked = q.entry("uid-a")
    assert parked is not None
    assert (parked.where, parked.attempts, parked.waits_for) == ("unschedulable", 0, "claim")
    assert parked.last_message == "waiting for resource claim c to be created"
    assert q.cluster_changed(only=lambda p: p.waits_for == "any") == 0  # not a claim change
    missing.clear()  # the claim appeared
    assert q.cluster_changed(only=lambda p: p.waits_for == "claim") == 1
    again = q.pop()  # no backoff to sit out
    assert again is not None
    assert again.key == "ns/a"


def _sent_back_by_a_change(q: SchedulingQueue, name: str) -> None:
    """``name`` is tried, found no node, and a cluster change sends it back to wait its backoff."""
    q.add(gpu_pod(name, 1, namespace="ns", uid=f"uid-{name}"))
    attempt = q.pop()
    assert attempt is not None
    assert attempt.key == f"ns/{name}"
    q.failed(attempt, message="0/1 nodes are available")
    assert q.cluster_changed() == 1


def test_a_pod_sent_back_by_a_change_waits_its_backoff_behind_the_pods_ready_now() -> None:
    clock = ManualClock()
    q = make_queue(clock)
    _sent_back_by_a_change(q, "a")
    for name in ("b", "c"):
        q.add(gpu_pod(name, 1, namespace="ns", uid=f"uid-{name}"))
    assert [e.key for e in iter(q.pop, None)] == ["ns/b", "ns/c", "ns/a"]


def test_a_pod_sent_back_by_a_change_is_tried_at_once_when_nothing_else_is_ready() -> None:
    """kube-scheduler's SchedulerPopFromBackoffQ: the backoff orders pods, it never idles the
    scheduler."""
    clock = ManualClock()
    q = make_queue(clock)
    _sent_back_by_a_change(q, "a")
    assert q.next_ready_in() == 0.0
    again = q.pop()
    assert again is not None
    assert again.key == "ns/a"
    assert clock.now == 1000.0  # no time passed


def test_of_the_pods_backing_off_the_one_whose_backoff_ends_first_is_tried_first() -> None:
    clock = ManualClock()
    q = make_queue(clock)
    _sent_back_by_a_change(q, "a")  # backs off until 1001
    clock.now += 0.5
    _sent_back_by_a_change(q, "b")  # until 1001.5
    q.add(gpu_pod("high", 1, namespace="ns", uid="uid-high", priority=100))
    high = q.pop()
    assert high is not None
    q.failed(high)
    clock.now += 0.5  # the same change sends "high" back: its backoff ends with b's
    assert q.cluster_changed() == 1
    assert [e.key for e in iter(q.pop, None)] == ["ns/a", "ns/high", "ns/b"]


def waited_out(q: SchedulingQueue, clock: ManualClock) -> QueuedPod:
    """ns/a, not ready before its 1 s backoff is over, popped once it is."""
    assert q.pop() is None
    assert q.next_ready_in() == 1.0
    clock.now += 1.0
    again = q.pop()
    assert again is not None
    assert again.key == "ns/a"
    return again


def test_a_pod_retried_after_an_error_waits_its_backoff_out() -> None:
    """An API error or a lost bind race (kube's error backoff): popping it early would retry a
    pod still being bound in a tight loop."""
    clock, q, attempt = trying_a()
    q.retry(attempt)
    again = waited_out(q, clock)
    # A later unschedulable failure sent back by a change is an ordinary backoff again.
    q.failed(again)
    q.cluster_changed()
    assert q.pop() is again


def test_once_a_pod_tried_early_does_not_fit_none_is_tried_early_before_the_next_change() -> None:
    """Under churn every change wakes the waiting pods: tried early after each, every one would
    be refused again and again. After an early attempt that fails, backoffs are waited out until
    a change sends pods back; then one is tried early again."""
    clock = ManualClock()
    q = make_queue(clock)
    _sent_back_by_a_change(q, "a")
    _sent_back_by_a_change(q, "b")
    early = q.pop()  # nothing else ready: the backoff that ends first, at once
    assert early is not None
    assert early.key == "ns/a"
    q.failed(early, message="0/1 nodes are available")
    assert q.pop() is None  # b backs off still: not taken early after a's early failure
    assert q.next_ready_in() == 1.0  # b's backoff ends (a's second is 2 s)
    assert q.cluster_changed() == 1  # the next pod deleted sends a back
    again = q.pop()
    assert again is not None
    assert again.key == "ns/b"
    q.failed(again, message="0/1 nodes are available")
    assert q.pop() is None  # a's second backoff (2 s) is waited out; b waits for a change
    assert q.next_ready_in() == 2.0
    clock.now += 2.0
    assert q.pop() is early


def test_a_pod_tried_early_that_fits_leaves_early_tries_open() -> None:
    """A change that lets a waiting pod in (a pod its spread or affinity waits for bound): the
    pod tried early binds, and the next one is tried early too."""
    clock = ManualClock()
    q = make_queue(clock)
    _sent_back_by_a_change(q, "a")
    _sent_back_by_a_change(q, "b")
    first = q.pop()
    assert first is not None
    assert first.key == "ns/a"
    q.done(first)
    second = q.pop()
    assert second is not None
    assert second.key == "ns/b"


def test_without_pop_from_backoff_every_backoff_is_waited_out() -> None:
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1.0, pop_from_backoff=False), clock=clock)
    _sent_back_by_a_change(q, "a")
    waited_out(q, clock)
