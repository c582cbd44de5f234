"""Moved pods go where the scheduling framework's filters let them: a pod defragmentation moves
must pass node affinity, taints and inter-pod anti-affinity on its new node, given the other
moves of the same plan — where counting resources alone would send it to a node it may not run
on, the plan picks another node or moves nothing, saying why."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.domains.capacity import GPU, node_states
from coordinator.core.domains.packing import Member
from coordinator.core.framework.profile import Framework
from coordinator.core.preemption.defrag import DefragPlan, DefragSettings, plan_defrag
from coordinator.core.preemption.model import RunningPod
from coordinator.core.preemption.relocate import by_filters
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.inventory.state import Taint
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, request, running

NOW = 1_800_000_000.0
SETTINGS = DefragSettings()
FABRIC = {"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1"}
WEB = {"app": "web"}


def web_pod(i: int, node: str, **kw: Any) -> dict[str, Any]:
    obj = pod(f"web-{i}", gpus=1, namespace="ml", labels=WEB, node=node, **kw)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-web"}
    ]
    return obj


def cluster(
    webs: dict[str, dict[str, Any]],
    *,
    extra: dict[str, dict[str, Any]] | None = None,
    node_labels: dict[str, dict[str, str]] | None = None,
    taints: dict[str, tuple[Taint, ...]] | None = None,
    names: tuple[str, ...] = ("n1", "n2", "n3", "n4", "n5"),
) -> tuple[Snapshot, list[RunningPod], dict[str, Any]]:
    """Nodes of 8 GPUs; ``webs``: the movable web pods by node; ``extra``: an unmovable pod by
    node."""
    pods_on: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for node, obj in webs.items():
        pods_on[node].append(obj)
    for node, obj in (extra or {}).items():
        pods_on[node].append(obj)
    snapshot = Snapshot(
        [
            gpu_node(
                n,
                dgx_h100(n),
                labels={**FABRIC, **(node_labels or {}).get(n, {})},
                taints=(taints or {}).get(n, ()),
                pods=[running(o) for o in pods_on[n]],
            )
            for n in names
        ]
    )
    moving = [
        RunningPod(
            key=f"ml/{obj['metadata']['name']}",
            node=node,
            requests={GPU: 1},
            labels=WEB,
            started_at=NOW - 60,
            movable=True,
        )
        for node, obj in webs.items()
    ]
    specs = {f"ml/{o['metadata']['name']}": o for o in webs.values()}
    return snapshot, moving, specs


def gang(n: int) -> tuple[list[Member], dict[str, Any]]:
    objs = [pod(f"train-{i}", gpus=8, namespace="ml") for i in range(n)]
    reqs = {f"ml/train-{i}": request(o) for i, o in enumerate(objs)}
    return [Member(name=k, requests={GPU: 8}) for k in reqs], reqs


def plan(
    snapshot: Snapshot,
    moving: list[RunningPod],
    specs: dict[str, Any],
    *,
    filters: bool,
    framework: Framework | None = None,
) -> DefragPlan | object:
    members, reqs = gang(4)
    relocate = None
    if filters:
        relocate = by_filters(
            snapshot,
            framework or build_framework(),
            spec_of=lambda p: request(specs[p.key]) if p.key in specs else None,
            members=reqs,
        )
    return plan_defrag(
        members,
        priority=0,
        nodes=node_states(snapshot),
        running=moving,
        settings=SETTINGS,
        now=NOW,
        relocate=relocate,
    )


REQUIRE_WEB_POOL = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["web"]}]}
            ]
        }
    }
}


def six_nodes(**web_kw: Any) -> tuple[Snapshot, list[RunningPod], dict[str, Any], str]:
    """n1–n4 hold one web pod each, n5 is empty, n6 has 1 GPU free (7 held by a pod nothing
    moves): for a 4 × 8-GPU gang three web pods must move, and n6 is the tightest node."""
    names = ("n1", "n2", "n3", "n4", "n5", "n6")
    webs = {f"n{i}": web_pod(i, f"n{i}", **web_kw) for i in range(1, 5)}
    big = pod("batch", gpus=7, namespace="ml", node="n6")
    return *cluster(webs, extra={"n6": big}, names=names, **_n6_setup(web_kw)), "n6"


def _n6_setup(web_kw: dict[str, Any]) -> dict[str, Any]:
    if "affinity" in web_kw:  # n1–n5 are the web pool; n6 is not
        return {"node_labels": {f"n{i}": {"pool": "web"} for i in range(1, 6)}}
    taint = Taint(key="dedicated", value="batch", effect="NoSchedule")
    return {"taints": {"n6": (taint,)}}


@pytest.mark.parametrize(
    "web_kw",
    [{"affinity": REQUIRE_WEB_POOL}, {}],
    ids=["node affinity forbids n6", "n6 is tainted, the web pods do not tolerate it"],
)
def test_a_moved_pod_never_goes_to_a_node_its_filters_refuse(web_kw: dict[str, Any]) -> None:
    snapshot, moving, specs, forbidden = six_nodes(**web_kw)
    counted = plan(snapshot, moving, specs, filters=False)
    assert isinstance(counted, DefragPlan)
    # Counting resources alone, the tightest node — one the web pods may not run on — takes one.
    assert forbidden in dict(counted.destinations).values()
    filtered = plan(snapshot, moving, specs, filters=True)
    assert isinstance(filtered, DefragPlan), filtered
    assert len(filtered.moved) == 3
    assert forbidden not in dict(filtered.destinations).values()
    emptied = {n for _, n in filtered.plan.nominated}
    # Each moved pod lands on the one web node that stays, not on the nodes the gang takes.
    (stay,) = {"n1", "n2", "n3", "n4"} - emptied
    assert set(dict(filtered.destinations).values()) == {stay}


def test_anti_affinity_among_the_moved_pods_refuses_the_plan_and_says_why() -> None:
    # One web pod per node (required anti-affinity by hostname): three moved pods cannot share
    # the one node left to them, and there is no other, so nothing moves.
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": WEB}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    webs = {f"n{i}": web_pod(i, f"n{i}", affinity=anti) for i in range(1, 5)}
    snapshot, moving, specs = cluster(webs)
    counted = plan(snapshot, moving, specs, filters=False)
    assert isinstance(counted, DefragPlan)  # resources alone: three pods onto one node
    assert len(set(dict(counted.destinations).values())) == 1
    refused = plan(snapshot, moving, specs, filters=True)
    assert not isinstance(refused, DefragPlan)
    message = getattr(refused, "message", "")
    assert "would fit nowhere else once moved" in message
    assert "anti-affinity" in message
    assert "(no move is made)" in message


def test_a_pod_whose_spec_is_unknown_is_not_moved() -> None:
    webs = {f"n{i}": web_pod(i, f"n{i}") for i in range(1, 5)}
    snapshot, moving, _ = cluster(webs)
    refused = plan(snapshot, moving, {}, filters=True)
    assert not isinstance(refused, DefragPlan)
    assert "its spec is not known" in getattr(refused, "message", "")
