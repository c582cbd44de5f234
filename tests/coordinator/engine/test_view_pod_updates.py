"""A bound pod updated in what scheduling does not read (it started) leaves the scheduler's view
of its node as it was — same pods, nothing re-indexed — while a change it does read (its labels,
which pod affinity and spreading match) is in the next snapshot."""

from __future__ import annotations

from coordinator.engine.view import ClusterView
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory


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
