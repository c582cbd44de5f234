"""Pod (anti-)affinity terms with a ``namespaceSelector``, scheduled from the view's snapshot as
the coordinator does, follow kube-scheduler's namespace rule: the namespaces listed plus those
whose labels the selector matches; an empty selector (``{}``) selects every namespace; with
neither, the incoming pod's own namespace. The counts behind those terms are kept from one cycle
to the next, so a namespace relabelled, or created with a pod in it, between two cycles must be
seen by the next one, as kube-scheduler reads namespace labels afresh in each PreFilter.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Failure
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.engine.view import ClusterView
from coordinator.inventory.state import KubeNode
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod
from devcluster.pods import pod

HOST = "kubernetes.io/hostname"
EVERY_NODE = build_framework(SchedulerConfig(percentage_of_nodes_to_score=100))
NODES = ("n1", "n2", "n3", "n4")


def _view() -> tuple[ClusterView, Inventory]:
    """A cache pod on n1 in ``infra`` (team platform), on n2 in ``other`` (no labels), on n3 in
    ``web`` (the incoming pods' namespace); n4 empty."""
    inventory = Inventory()
    for name in NODES:
        inventory.upsert_node(
            KubeNode(name=name, labels={HOST: name}, allocatable={"cpu": 64000, "pods": 110})
        )
    view = ClusterView(inventory)
    view.set_namespace("infra", {"team": "platform"})
    view.set_namespace("other", {})
    view.set_namespace("web", {})
    for name, namespace in (("n1", "infra"), ("n2", "other"), ("n3", "web")):
        _bind(inventory, f"cache-{namespace}", namespace, name)
    return view, inventory


def _bind(inventory: Inventory, name: str, namespace: str, node: str) -> None:
    obj = pod(name, namespace=namespace, uid=name, memory=None, labels={"app": "cache"}, node=node)
    seen = bound_pod(obj)
    assert seen is not None
    inventory.upsert_pod(seen)


def _incoming(kind: str, **namespaces: Any) -> PodRequest:
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST, **namespaces}
    affinity = {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    request = parse_pod(
        pod("incoming", namespace="web", cpu="100m", memory=None, affinity=affinity)
    )
    assert isinstance(request, PodRequest)
    return request


def _feasible(view: ClusterView, request: PodRequest) -> set[str]:
    snapshot = view.snapshot()
    result = schedule_one(request, snapshot, EVERY_NODE)
    if isinstance(result, Failure):
        return set()
    return {n for n in NODES if result.verdicts[n].status.is_success}


SELECTED = [
    ({"namespaceSelector": {"matchLabels": {"team": "platform"}}}, {"n1"}),
    ({"namespaceSelector": {}}, {"n1", "n2", "n3"}),  # every namespace
    ({}, {"n3"}),  # the incoming pod's own
    ({"namespaces": ["other"]}, {"n2"}),
    (
        {"namespaces": ["other"], "namespaceSelector": {"matchLabels": {"team": "platform"}}},
        {"n1", "n2"},
    ),
    ({"namespaces": ["other"], "namespaceSelector": {}}, {"n1", "n2", "n3"}),
    ({"namespaceSelector": {"matchLabels": {"team": "nobody"}}}, set()),
]


@pytest.mark.parametrize(("namespaces", "caches"), SELECTED)
def test_anti_affinity_refuses_the_nodes_of_the_caches_its_namespaces_hold(
    namespaces: dict[str, Any], caches: set[str]
) -> None:
    view, _ = _view()
    assert _feasible(view, _incoming("podAntiAffinity", **namespaces)) == set(NODES) - caches


@pytest.mark.parametrize(("namespaces", "caches"), SELECTED)
def test_affinity_accepts_only_the_nodes_of_the_caches_its_namespaces_hold(
    namespaces: dict[str, Any], caches: set[str]
) -> None:
    view, _ = _view()
    assert _feasible(view, _incoming("podAffinity", **namespaces)) == caches


def test_a_namespace_relabelled_or_created_between_cycles_counts_in_the_next() -> None:
    view, inventory = _view()
    by_team = {"namespaceSelector": {"matchLabels": {"team": "platform"}}}
    avoid, join = _incoming("podAntiAffinity", **by_team), _incoming("podAffinity", **by_team)
    assert _feasible(view, avoid) == {"n2", "n3", "n4"}
    assert _feasible(view, join) == {"n1"}

    view.set_namespace("other", {"team": "platform"})  # labelled: its cache on n2 counts
    assert _feasible(view, avoid) == {"n3", "n4"}
    assert _feasible(view, join) == {"n1", "n2"}

    view.set_namespace("infra", {"team": "data"})  # relabelled: its cache on n1 no longer
    assert _feasible(view, avoid) == {"n1", "n3", "n4"}
    assert _feasible(view, join) == {"n2"}

    view.set_namespace("late", {"team": "platform"})  # a new namespace, a cache bound in it
    _bind(inventory, "cache-late", "late", "n4")
    assert _feasible(view, avoid) == {"n1", "n3"}
    assert _feasible(view, join) == {"n2", "n4"}

    view.set_namespace("other", None)  # deleted (its pod's deletion not seen yet)
    assert _feasible(view, avoid) == {"n1", "n2", "n3"}
    assert _feasible(view, join) == {"n4"}
