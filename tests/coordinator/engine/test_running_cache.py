"""The running pods preemption plans on are converted once per bound pod and kept between
attempts: a pod that changes (a new priority, a Job that becomes restartable), a gang whose
PodGroup appears, and a pod that goes are all seen on the next call as on a fresh conversion."""

from __future__ import annotations

from typing import Any

import msgspec

from coordinator.engine.gangs.running import RunningByNode, RunningCache, running_pods
from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import Inventory


def _pod(name: str, node: str = "n1", **fields: Any) -> BoundPod:
    return BoundPod(
        uid=f"uid-{name}", namespace="ns", name=name, node=node, requests={"cpu": 100}, **fields
    )


def _by_key(inventory: Inventory, cache: RunningCache | None, **kw: Any) -> dict[str, Any]:
    return {p.key: p for p in running_pods(inventory, kw.pop("podgroups", {}), cache=cache, **kw)}


def _same_as_fresh(inventory: Inventory, cache: RunningCache, **kw: Any) -> dict[str, Any]:
    cached = _by_key(inventory, cache, **dict(kw))
    assert cached == _by_key(inventory, None, **kw)
    return cached


def test_changes_between_calls_are_seen_as_by_a_fresh_conversion() -> None:
    inventory = Inventory()
    job = {"owner_kind": "Job", "owner_uid": "job-1"}
    gang = {"labels": {"topos.io/gang": "g", "topos.io/gang-min": "2"}}
    for pod in (_pod("a"), _pod("b", **job), _pod("c", **gang)):
        inventory.upsert_pod(pod)
    cache = RunningCache()
    first = _same_as_fresh(inventory, cache)
    assert {k: p.priority for k, p in first.items()} == {"ns/a": 0, "ns/b": 0, "ns/c": 0}
    assert not first["ns/b"].movable

    inventory.upsert_pod(msgspec.structs.replace(_pod("a"), priority=7))
    changed = _same_as_fresh(inventory, cache, restartable={"job-1"})
    assert changed["ns/a"].priority == 7
    assert changed["ns/b"].movable  # its Job now recreates it without failing
    assert changed["ns/c"].gang is not None
    assert first["ns/c"].gang == changed["ns/c"].gang

    inventory.delete_pod("uid-a")
    assert "ns/a" not in _same_as_fresh(inventory, cache)


def test_an_unchanged_pod_in_no_gang_is_not_converted_again() -> None:
    inventory = Inventory()
    inventory.upsert_pod(_pod("a"))
    cache = RunningCache()
    first = _by_key(inventory, cache)
    assert _by_key(inventory, cache)["ns/a"] is first["ns/a"]


def test_a_bad_min_runtime_is_reported_on_every_call() -> None:
    inventory = Inventory()
    inventory.upsert_pod(_pod("a", annotations={"topos.io/min-runtime": "soon"}))
    cache = RunningCache()
    for _ in range(2):
        problems: dict[str, tuple[str, str]] = {}
        running_pods(inventory, {}, problems=problems, cache=cache)
        assert list(problems) == ["uid-a"]
        assert problems["uid-a"][0] == "ns/a"
        assert "topos.io/min-runtime" in problems["uid-a"][1]


def test_the_pods_by_node_follow_the_inventory_as_a_fresh_conversion() -> None:
    """:class:`RunningByNode` gives each node's pods as :func:`running_pods` converts them, sees
    every change on the next read, keeps unchanged pods' conversions, and says whether any
    pod names a gang (whose gang it does not work out)."""
    inventory = Inventory()
    bad = {"annotations": {"topos.io/min-runtime": "soon"}}
    gang = {"labels": {"topos.io/gang": "g", "topos.io/gang-min": "2"}}
    for pod in (_pod("a"), _pod("b", **bad), _pod("c", node="n2", **gang), _pod("d", node="n2")):
        inventory.upsert_pod(pod)
    index = RunningByNode(inventory, keep=lambda p: p.key != "ns/d")

    def fresh(node: str) -> list[Any]:
        return [p for p in running_pods(inventory, {}) if p.node == node and p.key != "ns/d"]

    assert list(index.on("n1")) == fresh("n1")
    assert [p.key for p in index.on("n1")] == ["ns/a", "ns/b"]
    assert not index.plain  # c names a gang
    assert [p.key for p in index.on("n2")] == []  # d is not kept; c is in a gang
    assert list(index.problems()) == ["uid-b"]

    inventory.delete_pod("uid-c")
    assert index.plain
    b = index.on("n1")[1]
    inventory.upsert_pod(msgspec.structs.replace(_pod("a"), priority=7))
    assert list(index.on("n1")) == fresh("n1")
    assert index.on("n1")[0].priority == 7
    assert index.on("n1")[1] is b  # unchanged: not converted again

    inventory.upsert_pod(_pod("b"))  # its annotation mended
    assert index.problems() == {}
    inventory.delete_pod("uid-a")
    assert [p.key for p in index.on("n1")] == ["ns/b"]
    assert index.on("n3") == ()
    index.close()
    inventory.upsert_pod(_pod("e", node="n3"))
    assert index.on("n3") == ()  # unsubscribed: changes are no longer seen


def test_a_labelled_gangs_pod_is_kept_and_a_podgroups_pod_follows_its_podgroup() -> None:
    """A pod whose labels alone declare its gang is converted once; one whose gang is a
    scheduler-plugins PodGroup is converted on every call, so the PodGroup made or deleted is
    seen at once."""
    inventory = Inventory()
    labelled = {"labels": {"topos.io/gang": "g", "topos.io/gang-min": "2"}}
    grouped = {"labels": {"scheduling.x-k8s.io/pod-group": "pg"}}
    inventory.upsert_pod(_pod("a", **labelled))
    inventory.upsert_pod(_pod("b", **grouped))
    cache = RunningCache()
    first = _same_as_fresh(inventory, cache)
    assert first["ns/a"].gang == "ns/g"
    assert first["ns/b"].gang is None  # its PodGroup does not exist yet
    group = {"metadata": {"uid": "pg-1"}, "spec": {"minMember": 2}}
    second = _same_as_fresh(inventory, cache, podgroups={("ns", "pg"): group})
    assert second["ns/a"] is first["ns/a"]
    assert second["ns/b"].gang == "ns/pg"
    assert _same_as_fresh(inventory, cache)["ns/b"].gang is None  # the PodGroup deleted
