"""``Snapshot.assume`` (what-if, gang trials, relocation) on a node holding many pods: the list of
pods with affinity terms is dropped only when it holds the node's previous version, found
without a walk over the node's pods, and is never left pointing at an old version."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import plain_node, request, running

_TERM = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
_ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_TERM]}}


def _with_affinity(name: str) -> Any:
    obj = pod(name, labels={"app": "db"})
    obj["spec"]["affinity"] = _ANTI
    return obj


def _plain(name: str) -> PodRequest:
    return request(pod(name, labels={"app": "web"}))


def test_an_assume_onto_a_crowded_node_does_not_walk_its_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    crowd = [running(pod(f"old-{i}", labels={"app": "web"})) for i in range(2000)]
    snapshot = Snapshot([plain_node("a", pods=crowd, extra={"pods": 5000})])
    assert snapshot.pods_with_affinity() == []  # the index and its list are built
    asked = []
    has_affinity = PodInfo.has_affinity

    def counted(self: PodInfo) -> bool:
        asked.append(self.name)
        return has_affinity.fget(self)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(PodInfo, "has_affinity", property(counted))
    snapshot.assume(_plain("new"), "a", Placement())
    assert len(asked) <= 1  # the new pod alone, not the 2,000 already there


def test_the_pods_with_affinity_follow_their_node_through_assume_and_forget() -> None:
    snapshot = Snapshot([plain_node("a", pods=[running(_with_affinity("db-0"))]), plain_node("b")])
    ((node, held),) = snapshot.pods_with_affinity()
    assert node is snapshot.by_name["a"]
    assert held.name == "db-0"
    before = snapshot.pods_with_affinity()
    snapshot.assume(_plain("web-b"), "b", Placement())  # another node: the list stands
    assert snapshot.pods_with_affinity() is before
    snapshot.assume(_plain("web-a"), "a", Placement())  # its node: now the new version
    ((node, _),) = snapshot.pods_with_affinity()
    assert node is snapshot.by_name["a"]
    assert any(p.name == "web-a" for p in node.pods)
    snapshot.forget("default/web-a")
    ((node, _),) = snapshot.pods_with_affinity()
    assert node is snapshot.by_name["a"]
    assert not any(p.name == "web-a" for p in node.pods)
