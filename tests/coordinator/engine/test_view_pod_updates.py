"""A bound pod updated in what scheduling does not read (it started) leaves the scheduler's view
of its node as it was — same pods, nothing re-indexed — while a change it does read (its labels,
which pod affinity and spreading match) is in the next snapshot. Likewise a bind seen as it was
assumed keeps the node as assumed (with what the cycles remembered on it), and one seen otherwise
is rebuilt from it."""

from __future__ import annotations

from typing import Any

from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.snapshot.podinfo import Placement
from coordinator.engine.view import ClusterView
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod


def _pod(app: str = "web", started_at: float | None = None) -> BoundPod:
    return BoundPod(
        uid="u1",
        namespace="ns",
        name="a",
        node="n1",
        requests={"cpu": 1000},
        labels={"app": app},
        started_at=started_at,
    )


def test_a_started_pod_keeps_its_node_and_a_relabelled_one_is_seen() -> None:
    inventory = Inventory()
    inventory.upsert_node(KubeNode(name="n1", allocatable={"cpu": 4000, "pods": 110}))
    inventory.upsert_pod(_pod())
    view = ClusterView(inventory)
    before = view.snapshot().by_name["n1"]
    (info,) = before.pods

    inventory.upsert_pod(_pod(started_at=100.0))
    node = view.snapshot().by_name["n1"]
    assert node.pods[0] is info  # nothing the scheduler reads changed
    assert node.requested == before.requested

    inventory.upsert_pod(_pod(app="db"))
    (relabelled,) = view.snapshot().by_name["n1"].pods
    assert relabelled.labels == {"app": "db"}
    assert [n for n, _ in view.snapshot().pods_with_label("app", "db")] == [
        view.snapshot().by_name["n1"]
    ]
    assert view.snapshot().pods_with_label("app", "web") == []


def _pending(uid: str, app: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{uid}", "namespace": "ns", "uid": uid, "labels": {"app": app}},
        "spec": {
            "schedulerName": "topos",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }


def _bound(obj: dict[str, Any]) -> BoundPod:
    seen = bound_pod({**obj, "spec": {**obj["spec"], "nodeName": "n1"}})
    assert seen is not None
    return seen


def test_a_bind_seen_as_assumed_keeps_the_node_its_memos_and_a_different_one_is_rebuilt() -> None:
    inventory = Inventory()
    inventory.upsert_node(KubeNode(name="n1", allocatable={"cpu": 4000, "pods": 110}))
    view = ClusterView(inventory)
    view.snapshot()
    first = _pending("u1")
    request = parse_pod(first)
    assert isinstance(request, PodRequest)
    view.assume(request, "n1", Placement())
    assumed = view.snapshot().by_name["n1"]
    assumed.memo["verdict"] = "feasible"  # what a cycle remembered on the node as assumed
    assert assumed.requested["cpu"] == 500

    inventory.upsert_pod(_bound(first))  # the watch shows the bind
    node = view.snapshot().by_name["n1"]
    assert view.held("u1") is None  # the inventory counts it now
    assert node is assumed
    assert node.memo["verdict"] == "feasible"
    assert node.requested["cpu"] == 500  # counted once

    # Relabelled before its bind was seen: not the pod assumed, so the node is rebuilt with it.
    second = _pending("u2")
    request = parse_pod(second)
    assert isinstance(request, PodRequest)
    view.assume(request, "n1", Placement())
    assumed = view.snapshot().by_name["n1"]
    inventory.upsert_pod(_bound(_pending("u2", app="db")))
    node = view.snapshot().by_name["n1"]
    assert node is not assumed
    assert "verdict" not in node.memo
    assert node.requested["cpu"] == 1000
    assert [p.labels["app"] for p in node.pods] == ["web", "db"]
    assert [n.name for n, _ in view.snapshot().pods_with_label("app", "db")] == ["n1"]


def test_a_pod_assumed_where_it_is_bound_already_frees_its_room_when_deleted() -> None:
    # The pending watch lagged behind a bind by someone else: the pod is assumed onto the node
    # the inventory already shows it on. Another pod's event on that node ends the assumption
    # (the inventory counts the pod), so its deletion frees the room at once.
    inventory = Inventory()
    inventory.upsert_node(KubeNode(name="n1", allocatable={"cpu": 4000, "pods": 110}))
    view = ClusterView(inventory)
    view.snapshot()
    early = _pending("u1")
    inventory.upsert_pod(_bound(early))
    request = parse_pod(early)
    assert isinstance(request, PodRequest)
    view.assume(request, "n1", Placement())
    assert view.snapshot().by_name["n1"].requested["cpu"] == 500  # counted once

    inventory.upsert_pod(_bound(_pending("u2")))  # another pod's bind seen there
    assert view.held("u1") is None
    inventory.delete_pod("u1")
    assert view.snapshot().by_name["n1"].requested["cpu"] == 500  # u2's alone
