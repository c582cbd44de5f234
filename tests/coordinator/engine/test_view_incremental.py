"""The scheduler's view follows a node's pods one at a time — pods bound, started, relabelled,
deleted, moved, assumed and released, many on one node as on a DaemonSet's — and every snapshot
is the one a view built afresh from the inventory (with the same assumptions) gives: the same
nodes, pods in the same order, the same requests, and the same answers from the pod indexes
the inter-pod plugins read."""

from __future__ import annotations

import random
from typing import Any

import pytest

from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.view import ClusterView
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod

NODES = ("n1", "n2", "n3")
APPS = ("web", "db", "cache")


def _obj(uid: str, app: str, cpu: int, *, anti: bool = False, port: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c",
        "image": "x",
        "resources": {"requests": {"cpu": f"{cpu}m"}},
    }
    if port:
        container["ports"] = [{"containerPort": 80, "hostPort": 8000 + int(uid[1:])}]
    spec: dict[str, Any] = {"schedulerName": "topos", "containers": [container]}
    if anti:
        term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "zone"}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{uid}", "namespace": "ns", "uid": uid, "labels": {"app": app}},
        "spec": spec,
    }


def _bound(obj: dict[str, Any], node: str, started: float | None = None) -> BoundPod:
    status = {} if started is None else {"phase": "Running", "startTime": "2026-11-30T12:00:00Z"}
    seen = bound_pod({**obj, "spec": {**obj["spec"], "nodeName": node}, "status": status})
    assert seen is not None
    return seen


def _request(obj: dict[str, Any]) -> PodRequest:
    request = parse_pod(obj)
    assert isinstance(request, PodRequest)
    return request


def _indexed(snap: Snapshot) -> tuple[object, ...]:
    """What the inter-pod plugins read of the snapshot's pod indexes."""
    return (
        {a: sorted((n.name, p.uid) for n, p in snap.pods_with_label("app", a)) for a in APPS},
        sorted((n.name, p.uid) for n, p in snap.pods_with_affinity()),
        {t: dict(v) for t, v in snap.anti_affinity_terms().items() if any(v.values())},
    )


def _same_as_afresh(view: ClusterView, inventory: Inventory, held: dict[str, Any]) -> None:
    snap = view.snapshot()
    fresh = ClusterView(inventory)
    for uid, (obj, node) in held.items():
        if view.held(uid) is not None:
            fresh.assume(_request(obj), node, Placement())
    expected = fresh.snapshot()
    assert [n.name for n in snap.nodes] == [n.name for n in expected.nodes]
    for node in expected.nodes:
        assert snap.by_name[node.name] == node, node.name
    assert _indexed(snap) == _indexed(expected)


@pytest.mark.parametrize("seed", range(4))
def test_a_view_kept_pod_by_pod_is_the_view_built_afresh(seed: int) -> None:
    rng = random.Random(seed)
    inventory = Inventory()
    for i, name in enumerate(NODES):
        labels = {"zone": f"z{i % 2}"}
        inventory.upsert_node(
            KubeNode(name=name, labels=labels, allocatable={"cpu": 10**6, "pods": 10**4})
        )
    view = ClusterView(inventory)
    _indexed(view.snapshot())  # the indexes exist: from now on they are kept up to date
    objs: dict[str, dict[str, Any]] = {}  # uid → the pod as last written
    bound: dict[str, str] = {}  # uid → its node
    held: dict[str, Any] = {}  # uid → (pod, node) assumed by the view
    for step in range(250):
        roll = rng.random()
        uid = f"u{step}"
        if roll < 0.30 or not bound:  # a pod bound (mostly on one busy node)
            node = "n1" if rng.random() < 0.7 else rng.choice(NODES)
            obj = objs[uid] = _obj(
                uid,
                rng.choice(APPS),
                rng.choice((100, 200)),
                anti=rng.random() < 0.2,
                port=rng.random() < 0.1,
            )
            inventory.upsert_pod(_bound(obj, node))
            bound[uid] = node
        elif roll < 0.45:  # assumed, then bound as assumed, or otherwise, or released
            node = rng.choice(NODES)
            obj = objs[uid] = _obj(uid, rng.choice(APPS), 300)
            view.assume(_request(obj), node, Placement())
            held[uid] = (obj, node)
        elif roll < 0.55 and held:
            done = rng.choice(sorted(held))
            obj, node = held.pop(done)
            fate = rng.random()
            if fate < 0.6:
                inventory.upsert_pod(_bound(obj, node))  # the bind seen
                bound[done] = node
            elif fate < 0.8:
                inventory.upsert_pod(
                    _bound({**obj, "metadata": {**obj["metadata"], "labels": {"app": "db"}}}, node)
                )
                bound[done] = node
            else:
                view.release(done)
        elif roll < 0.70:  # started: nothing the scheduler reads changed
            some = rng.choice(sorted(bound))
            inventory.upsert_pod(_bound(objs[some], bound[some], started=1.0))
        elif roll < 0.78:  # relabelled where it is
            some = rng.choice(sorted(bound))
            obj = objs[some]
            obj = objs[some] = {
                **obj,
                "metadata": {**obj["metadata"], "labels": {"app": rng.choice(APPS)}},
            }
            inventory.upsert_pod(_bound(obj, bound[some]))
        elif roll < 0.92:  # deleted
            some = rng.choice(sorted(bound))
            inventory.delete_pod(some)
            del bound[some]
        elif roll < 0.97:  # moved to another node
            some = rng.choice(sorted(bound))
            bound[some] = rng.choice(NODES)
            inventory.upsert_pod(_bound(objs[some], bound[some]))
        else:  # the node itself changed: rebuilt from the inventory
            name = rng.choice(NODES)
            inventory.upsert_node(
                KubeNode(
                    name=name,
                    labels={"zone": "z1", "step": str(step)},
                    allocatable={"cpu": 10**6, "pods": 10**4},
                )
            )
        if rng.random() < 0.3:
            _same_as_afresh(view, inventory, held)
    _same_as_afresh(view, inventory, held)
