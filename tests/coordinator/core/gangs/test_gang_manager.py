"""The gang manager's all-or-nothing state machine with a fake clock: gangs that fit, that don't,
that time out, that are served in priority order, and that must not block smaller work."""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member
from coordinator.core.gangs.identity import GangKey, GangSpec
from coordinator.core.gangs.manager import Allow, GangManager, Reject, Reservation
from coordinator.core.gangs.plan import GangPlan, plan_gang
from coordinator.core.status import Status
from tests.support.clock import ManualClock
from tests.support.gang_capacity import with_reservations


def spec(name: str, n: int, timeout: float | None = None) -> GangSpec:
    return GangSpec(key=GangKey("ml", name), min_member=n, timeout_s=timeout, source="topos")


def pods(name: str, n: int) -> list[str]:
    return [f"ml/{name}-{i}" for i in range(n)]


def res(pod: str, node: str, gpus: int = 8) -> Reservation:
    return Reservation(pod=pod, node=node, requests={GPU: gpus})


def cluster(n: int = 4) -> list[NodeState]:
    return [
        NodeState(
            name=f"n{i}",
            labels={"topos.io/leaf": "leaf-1"},
            allocatable={GPU: 8},
            free={GPU: 8},
        )
        for i in range(1, n + 1)
    ]


def manager(clock: ManualClock | None = None, **kw: float) -> GangManager:
    return GangManager(clock=clock or ManualClock(), **kw)


def test_gang_is_released_together_only_when_its_plan_places_min_members() -> None:
    m = manager()
    key = GangKey("ml", "train-1")
    for p in pods("train-1", 8):
        m.observe(p, spec("train-1", 8))
    short = m.reserve(key, [res(p, f"n{i}") for i, p in enumerate(pods("train-1", 7))])
    assert isinstance(short, Reject)
    assert short.message == "pod group train-1: the plan places 7/8 members"
    assert m.status(key).reserved == 0  # type: ignore[union-attr]  # a short plan holds nothing
    assert m.message(key) == "waiting for pod group train-1: 0/8 members placed"
    last = m.reserve(key, [res(p, f"n{i}") for i, p in enumerate(pods("train-1", 8))])
    assert isinstance(last, Allow)
    assert last.pods == tuple(sorted(pods("train-1", 8)))
    for p in last.pods:
        m.bound(p)
    status = m.status(key)
    assert status is not None
    assert (status.phase, status.bound, status.reserved) == ("Bound", 8, 0)
    # a ninth member of a bound gang schedules without waiting
    m.observe("ml/train-1-8", spec("train-1", 8))
    assert m.reserve(key, [res("ml/train-1-8", "n9")]) == Allow(("ml/train-1-8",))


def test_message_counts_missing_pods() -> None:
    m = manager()
    for p in pods("spark", 5):
        m.observe(p, spec("spark", 11))
    key = GangKey("ml", "spark")
    assert m.message(key) == "waiting for pod group spark: 0/11 members placed (5 of 11 pods exist)"
    assert not m.ready_to_plan(key)
    assert m.status(key).phase == "Pending"  # type: ignore[union-attr]


def test_a_short_gang_is_arriving_while_new_members_keep_joining_and_for_30s_at_most() -> None:
    clock = ManualClock()
    m = manager(clock)
    key = GangKey("ml", "spark")

    def arriving() -> bool:
        return m.arriving(key, quiet_s=2.0, within_s=30.0)

    assert not arriving()  # unknown
    m.observe("ml/spark-0", spec("spark", 3))
    clock.now += 1.9
    assert arriving()
    m.observe("ml/spark-0", spec("spark", 3))  # seen again: no new member
    clock.now += 0.1
    assert not arriving()  # 2 s without a new member
    m.observe("ml/spark-1", spec("spark", 3))
    assert arriving()  # a new member: arriving again
    for i in range(2, 17):  # a new member every 1.9 s (one leaves: still short), 30.5 s in all
        clock.now += 1.9
        m.remove(f"ml/spark-{i - 1}")
        m.observe(f"ml/spark-{i}", spec("spark", 3))
        assert arriving() == (clock.now - 1000.0 < 30.0), clock.now  # over 30 s after the first
    assert round(clock.now - 1000.0, 6) == 30.5
    full = GangKey("ml", "full")
    for p in pods("full", 2):
        m.observe(p, spec("full", 2))
    assert not m.arriving(full, quiet_s=2.0, within_s=30.0)  # min members exist: none missing


def test_whole_gang_plan_reserve_and_a_second_gang_that_no_longer_fits_holds_nothing() -> None:
    m = manager()
    nodes = cluster(4)
    a, b = GangKey("ml", "a"), GangKey("ml", "b")
    for p in pods("a", 3):
        m.observe(p, spec("a", 3))
    for p in pods("b", 3):
        m.observe(p, spec("b", 3))
    assert m.ready_to_plan(a)
    assert m.ready_to_plan(b)

    members_a = [Member(name=p, requests={GPU: 8}) for p in m.unplaced(a)]
    plan_a = plan_gang(members_a, nodes, min_member=3)
    assert isinstance(plan_a, GangPlan)
    verdict = m.reserve(a, plan_a.reservations(members_a))
    assert isinstance(verdict, Allow)
    assert len(verdict.pods) == 3

    # the next cycle sees a's reservations in its capacity; b (each fits alone) cannot fit now
    after = with_reservations(nodes, m.reservations())
    members_b = [Member(name=p, requests={GPU: 8}) for p in m.unplaced(b)]
    plan_b = plan_gang(members_b, after, min_member=3)
    assert isinstance(plan_b, Status)
    rejected = m.reject(b, plan_b.message)
    assert rejected.released == ()
    assert m.message(b).startswith("waiting for pod group b: 0/3 members placed; 0/4 nodes")
    assert "3 Insufficient nvidia.com/gpu" in m.message(b)
    # no head-of-line blocking: b holds nothing, so a 1-GPU pod still fits on the free node
    small = plan_gang([Member(name="ml/small", requests={GPU: 1})], after)
    assert isinstance(small, GangPlan)
    # once a is bound and leaves, b fits
    for p in pods("a", 3):
        m.bound(p)
        m.remove(p)
    plan_b = plan_gang(members_b, with_reservations(nodes, m.reservations()), min_member=3)
    assert isinstance(plan_b, GangPlan)
    assert isinstance(m.reserve(b, plan_b.reservations(members_b)), Allow)


def test_gangs_are_listed_in_the_order_they_are_served_priority_before_age() -> None:
    clock = ManualClock()
    m = manager(clock)
    m.observe("ml/old-0", spec("old", 2), priority=0)
    clock.now += 10
    m.observe("ml/vip-0", spec("vip", 2), priority=1000)
    m.observe("ml/new-0", spec("new", 2), priority=0)
    assert [s.name for s in m.statuses()] == ["vip", "old", "new"]


def test_timeout_releases_the_whole_reservation_then_backs_off() -> None:
    clock = ManualClock()
    m = manager(clock, backoff_s=10.0)
    key = GangKey("ml", "t")
    for p in pods("t", 3):
        m.observe(p, spec("t", 3, timeout=60))
    assert isinstance(m.reserve(key, [res(p, f"n{i}") for i, p in enumerate(pods("t", 3))]), Allow)
    clock.now += 59  # the binds never report
    assert m.tick() == []
    clock.now += 1
    expired = m.tick()
    assert len(expired) == 1
    gone_key, verdict = expired[0]
    assert gone_key == key
    assert {r.pod for r in verdict.released} == {"ml/t-0", "ml/t-1", "ml/t-2"}
    assert verdict.message == "pod group t timed out after 60s: 3/3 members placed"
    assert m.reservations() == []
    assert m.status(key).phase == "TimedOut"  # type: ignore[union-attr]
    assert not m.ready_to_plan(key)
    clock.now += 10
    assert m.ready_to_plan(key)
    assert "timed out" in m.message(key)
    # a fresh timeout for the new attempt
    assert m.status(key).deadline == clock.now + 60  # type: ignore[union-attr]


def test_bind_failure_releases_the_rest_and_evicts_what_bound() -> None:
    m = manager()
    key = GangKey("ml", "g")
    for p in pods("g", 3):
        m.observe(p, spec("g", 3))
    verdict = m.reserve(key, [res(p, f"n{i}") for i, p in enumerate(pods("g", 3))])
    assert isinstance(verdict, Allow)
    m.bound("ml/g-0")
    failed = m.bind_failed("ml/g-1", "node n1 is gone")
    assert isinstance(failed, Reject)
    assert failed.evict == ("ml/g-0",)
    assert {r.pod for r in failed.released} == {"ml/g-1", "ml/g-2"}
    assert m.reservations() == []


def test_deleting_a_reserved_member_releases_the_whole_gang() -> None:
    m = manager()
    key = GangKey("ml", "g")
    for p in pods("g", 3):
        m.observe(p, spec("g", 3))
    assert isinstance(m.reserve(key, [res(p, f"n{i}") for i, p in enumerate(pods("g", 3))]), Allow)
    out = m.remove("ml/g-0")
    assert out is not None
    assert {r.pod for r in out.released} == {"ml/g-0", "ml/g-1", "ml/g-2"}
    assert m.reservations() == []
    assert m.status(key).members == 2  # type: ignore[union-attr]


def test_unknown_pods_and_gangs_are_refused_not_crashed() -> None:
    m = manager()
    key = GangKey("ml", "g")
    assert isinstance(m.reserve(key, [res("ml/x", "n1")]), Reject)
    m.observe("ml/g-0", spec("g", 2))
    outsider = m.reserve(key, [res("ml/intruder", "n1")])
    assert isinstance(outsider, Reject)
    assert "not a member" in outsider.message
    assert m.remove("ml/never-seen") is None
    assert m.bind_failed("ml/never-seen", "x") is None


def test_members_disagreeing_on_min_wait_until_they_agree_and_say_so() -> None:
    m = manager()
    key = GangKey("ml", "g")
    m.observe("ml/g-0", spec("g", 2))
    m.observe("ml/g-1", spec("g", 3))
    m.observe("ml/g-2", spec("g", 3))
    status = m.status(key)
    assert status is not None
    assert not m.ready_to_plan(key)  # three members exist, but which minimum holds?
    assert m.message(key) == (
        "pod group g: members disagree on the minimum: 2 (g-0) and 3 (g-1, g-2); "
        "none binds until they agree"
    )
    assert status.problems == (m.disagreement(key),)
    m.remove("ml/g-0")  # the odd one out is deleted (or re-created with gang-min 3)
    assert m.disagreement(key) == ""
    assert m.ready_to_plan(key) is False  # 2 of 3 exist
    m.observe("ml/g-0", spec("g", 3))
    assert m.ready_to_plan(key)
    assert m.status(key).problems == ()  # type: ignore[union-attr]


def test_a_job_scaled_up_after_its_gang_bound_adds_its_new_member_without_disagreeing() -> None:
    """A Job at parallelism 2 (inherited ``gang-min: 2``) bound; applied again at 3, its new pod
    declares 3. The bound members' 2 is what their run started with: it takes no part, the new
    member joins the running gang, and the gang's minimum is now 3."""
    m = manager()
    key = GangKey("ml", "train")
    for p in pods("train", 2):
        m.observe(p, spec("train", 2))
    assert isinstance(
        m.reserve(key, [res(p, f"n{i}") for i, p in enumerate(pods("train", 2))]), Allow
    )
    for p in pods("train", 2):
        m.bound(p)
    m.observe("ml/train-2", spec("train", 3))
    assert m.disagreement(key) == ""
    status = m.status(key)
    assert status is not None
    assert (status.phase, status.min_member, status.problems) == ("Bound", 3, ())
    m.bound("ml/train-2")
    assert m.status(key).problems == ()  # type: ignore[union-attr]  # all bound: nothing to decide


def test_after_a_restart_a_scaled_jobs_new_member_is_planned_with_the_bound_ones() -> None:
    """The coordinator restarts with the scaled Job's new pod pending (seen first) and the two
    bound: the gang needs one more member placed, beside the two, not a new agreement."""
    m = manager()
    key = GangKey("ml", "train")
    m.observe("ml/train-2", spec("train", 3))
    for p in pods("train", 2):
        m.observe(p, spec("train", 2), bound=True)
    assert m.disagreement(key) == ""
    assert m.needed(key) == 1
    assert m.ready_to_plan(key)
    assert isinstance(m.reserve(key, [res("ml/train-2", "n3")]), Allow)


def test_pending_members_that_disagree_still_wait_beside_bound_ones() -> None:
    m = manager()
    key = GangKey("ml", "g")
    m.observe("ml/g-0", spec("g", 2), bound=True)
    m.observe("ml/g-1", spec("g", 2))
    m.observe("ml/g-2", spec("g", 3))
    assert m.disagreement(key) == (
        "members disagree on the minimum: 2 (g-1) and 3 (g-2); none binds until they agree"
    )
    assert not m.ready_to_plan(key)


def test_a_gang_ends_with_its_last_member_and_a_rerun_starts_from_nothing() -> None:
    clock = ManualClock()
    m = manager(clock)
    old = GangKey("ml", "g", "job-uid-1")
    for p in pods("g", 4):
        m.observe(p, GangSpec(key=old, min_member=4, source="topos"), bound=True)
    assert m.status(old).phase == "Bound"  # type: ignore[union-attr]
    # A re-run (new Job, new names) while the old pods are still known: a separate gang.
    clock.now += 220
    new = GangKey("ml", "g", "job-uid-2")
    for p in pods("v", 3):
        m.observe(p, GangSpec(key=new, min_member=4, source="topos"))
    status = m.status(new)
    assert status is not None
    assert (status.phase, status.members, status.bound) == ("Pending", 3, 0)
    assert not m.ready_to_plan(new)
    assert m.find("ml", "g") == [new, old]  # the newest run first
    for p in pods("g", 4):
        m.remove(p)
    assert m.status(old) is None
    assert [s.key for s in m.statuses()] == [new]


def test_releasing_a_gang_keeps_bound_bare_pods_and_evicts_only_owned_ones() -> None:
    m = manager()
    key = GangKey("ml", "g")
    m.observe("ml/g-0", spec("g", 3), bare=True)
    m.observe("ml/g-1", spec("g", 3))
    m.observe("ml/g-2", spec("g", 3), bare=True)
    assert isinstance(m.reserve(key, [res(p, f"n{i}") for i, p in enumerate(pods("g", 3))]), Allow)
    m.bound("ml/g-0")
    m.bound("ml/g-1")
    failed = m.bind_failed("ml/g-2", "node n2 is gone")
    assert isinstance(failed, Reject)
    assert failed.evict == ("ml/g-1",)  # its Job makes it again
    assert failed.kept == ("ml/g-0",)  # nothing would make a bare pod again: it stays bound
    status = m.status(key)
    assert status is not None
    assert (status.bound, status.members) == (1, 3)
    m.remove("ml/g-1")
    m.observe("ml/g-1", spec("g", 3))  # the Job's replacement
    assert m.needed(key) == 2  # the kept member counts: two more complete the group


def test_restart_rebuilds_a_bound_gang_from_bound_pods() -> None:
    m = manager()
    for p in pods("g", 2):
        m.observe(p, spec("g", 2), bound=True)
    status = m.status(GangKey("ml", "g"))
    assert status is not None
    assert status.phase == "Bound"
    assert m.tick() == []  # a bound gang never times out


def test_plan_gang_falls_back_to_min_members() -> None:
    members = [Member(name=f"ml/w-{i}", requests={GPU: 8}) for i in range(5)]
    plan = plan_gang(members, cluster(4), min_member=4)
    assert isinstance(plan, GangPlan)
    assert plan.planned == ("ml/w-0", "ml/w-1", "ml/w-2", "ml/w-3")
    assert plan.left_over == ("ml/w-4",)
    short = plan_gang(members[:2], cluster(4), min_member=3)
    assert isinstance(short, Status)
    assert "2/3 members exist" in short.message


def test_a_running_gang_that_loses_a_member_re_forms_around_its_survivors() -> None:
    clock = ManualClock()
    m = manager(clock)
    key = GangKey("ml", "g")
    for p in pods("g", 3):
        m.observe(p, spec("g", 3, timeout=60), bound=True)
    assert m.status(key).phase == "Bound"  # type: ignore[union-attr]
    clock.now += 500
    m.remove("ml/g-1")  # evicted for recovery
    status = m.status(key)
    assert status is not None
    assert (status.phase, status.bound) == ("Pending", 2)
    assert "member ml/g-1 is gone: 2/3 members bound" in m.message(key)
    m.observe("ml/g-1b", spec("g", 3, timeout=60))  # the replacement pod
    assert m.ready_to_plan(key)
    assert m.unplaced(key) == ("ml/g-1b",)
    assert m.needed(key) == 1
    assert m.reserve(key, [res("ml/g-1b", "n9")]) == Allow(("ml/g-1b",))
    m.bound("ml/g-1b")
    assert m.status(key).phase == "Bound"  # type: ignore[union-attr]
