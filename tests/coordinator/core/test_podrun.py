"""A node's pods shared between the versions of the node (``PodRun``): each assume and each bind
seen makes a new ``NodeInfo`` without copying the node's pods, and every version still holds
exactly its own pods whichever version is extended next."""

from __future__ import annotations

from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import PodInfo
from coordinator.core.snapshot.podrun import PodRun
from devcluster.pods import pod
from tests.support.sched_hw import plain_node, running


def pods(prefix: str, n: int) -> list[PodInfo]:
    return [running(pod(f"{prefix}{i}", uid=f"uid-{prefix}{i}")) for i in range(n)]


def test_every_version_keeps_its_own_pods_whichever_is_extended() -> None:
    base = plain_node("n", pods=pods("old-", 3))
    a, b, c = pods("new-", 3)
    one = base.adding([a])
    two = one.adding([b])
    branch = one.adding([c])  # the older version extended again: its own pods, then c
    assert len(base.pods) == 3
    assert one.pods == (*base.pods, a)
    assert two.pods == (*base.pods, a, b)
    assert branch.pods == (*base.pods, a, c)
    for node in (one, two, branch):
        assert node == base.rebuild(node.pods)  # what a rebuild from its pods gives


def test_the_bind_seen_of_the_pod_assumed_next_is_the_node_as_assumed() -> None:
    """Two pods assumed, the first one's bind seen: the new base holds the first only, and the
    node as assumed (both) is unchanged by it."""
    base = plain_node("n", pods=pods("old-", 2))
    a, b = pods("new-", 2)
    assumed = base.adding([a, b])
    seen = base.adding([a])
    assert seen.pods == (*base.pods, a)
    assert assumed.pods == (*base.pods, a, b)
    assert seen.adding([b]).pods == assumed.pods


def test_extending_the_newest_version_copies_no_pod() -> None:
    """The cost a DaemonSet's node paid per assumed pod: the newest version is extended in
    place, whatever the number of pods already there."""
    node: NodeInfo = plain_node("n", pods=pods("old-", 2_000))
    node = node.adding(pods("a-", 1))  # the list starts here (one copy)
    shared = node.pod_run._items
    for p in pods("b-", 50):
        node = node.adding([p])
        assert node.pod_run._items is shared
    assert len(node.pods) == 2_051


def test_a_run_reads_as_its_tuple() -> None:
    ps = tuple(pods("p-", 4))
    run = PodRun(ps[:2]).extended(ps[2:])
    assert len(run) == 4
    assert list(run) == list(ps)
    assert run.pods() == ps
    assert run.after(1) == ps[1:]
    assert run == PodRun(ps)
    assert run != PodRun(ps[:3])


def test_an_older_version_extended_many_times_keeps_the_newer_ones_intact() -> None:
    """The node as assumed extended pod by pod while the node as the inventory shows it moves on
    (binds seen out of order): past the short tail each keeps, the pods are copied once into a
    list of their own, and every version still holds exactly its pods."""
    base = PodRun(tuple(pods("old-", 5)))
    newer = base.extended(pods("seen-", 1))  # the inventory's node moves on: base is older
    assumed = base.joined([])
    versions = []
    expected: list[PodInfo] = list(base.pods())
    for p in pods("a-", 150):
        assumed = assumed.extended([p])
        expected.append(p)
        versions.append((assumed, tuple(expected)))
        newer = newer.extended([running(pod(f"n-{len(versions)}", uid=f"n-{len(versions)}"))])
    for run, want in versions:
        assert run.pods() == want
        assert tuple(run) == want
        assert len(run) == len(want)
        assert run.after(3) == want[3:]
    assert len(newer) == 5 + 1 + 150
