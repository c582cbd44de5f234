"""Each invariant of the churn harness finds its violation in API-server objects, and a healthy
state passes."""

from __future__ import annotations

from typing import Any

from agent.devices import discover_profile
from common.labeling import LabelingSettings, labels
from devcluster.churn.checks import (
    NUMA_POLICY,
    Violation,
    check_state,
    has_reason,
    report,
    vanished,
)
from devcluster.pods import gpu_pod

TOPO = discover_profile("dgx-h100", hostname="n1")
UUIDS = [g.uuid for g in TOPO.gpus]  # GPUs 0-3 on NUMA 0, 4-7 on NUMA 1


def node(name: str = "n1", gpus: int = 8) -> dict[str, Any]:
    published = labels(TOPO, LabelingSettings())
    return {
        "metadata": {"name": name, "annotations": dict(published.annotations)},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def bound(name: str, gpus: int, uuids: list[str], *, on: str = "n1", **kw: Any) -> dict[str, Any]:
    pod = gpu_pod(name, gpus, node=on, **kw)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["metadata"]["annotations"]["topos.io/assigned-gpus"] = ",".join(uuids)
    return pod


def kinds(found: list[Violation]) -> list[str]:
    return [v.kind for v in found]


def test_a_healthy_state_passes() -> None:
    pods = [
        bound("a", 4, UUIDS[:4], annotations={NUMA_POLICY: "single-numa"}),
        bound("b", 2, UUIDS[4:6], gang=("g", 2)),
        bound("c", 2, UUIDS[6:8], gang=("g", 2)),
        gpu_pod("waiting", 8, gang=("h", 2)),
        gpu_pod("waiting-too", 8, gang=("h", 2)),
    ]
    assert check_state(1, pods, [node()]) == []


def test_a_gpu_on_two_live_pods_is_named_with_both_pods_and_the_uuid() -> None:
    pods = [bound("a", 2, UUIDS[:2]), bound("b", 1, UUIDS[1:2])]
    (v,) = check_state(3, pods, [node()])
    assert (v.kind, v.round, v.pod, v.node, v.uuid) == ("double-assigned", 3, "a", "n1", UUIDS[1])
    assert "also assigned to b" in str(v)
    finished = bound("b", 1, UUIDS[1:2])
    finished["status"] = {"phase": "Succeeded"}
    assert check_state(3, [pods[0], finished], [node()]) == []


def test_overcommit_partial_gang_and_missing_assignments() -> None:
    pods = [
        bound("a", 6, UUIDS[:6]),
        bound("b", 4, UUIDS[6:8]),  # 10 GPUs on an 8-GPU node, and b got 2 of 4
        bound("m0", 1, [], gang=("g", 3), on="n2"),
        gpu_pod("m1", 1, gang=("g", 3)),
        gpu_pod("m2", 1, gang=("g", 3)),
    ]
    found = check_state(1, pods, [node(), node("n2")])
    assert sorted(kinds(found)) == [
        "overcommitted",
        "partial-gang",
        "unassigned-gpus",
        "unassigned-gpus",
    ]
    partial = next(v for v in found if v.kind == "partial-gang")
    assert "gang g: 1 of min 3 members bound" in partial.detail


def test_ghost_nodes_unknown_uuids_and_split_numa() -> None:
    pods = [
        bound("ghost", 1, ["GPU-x"], on="ghost-dgx"),
        bound("made-up", 1, ["GPU-made-up"]),
        bound(
            "split", 2, [UUIDS[0], UUIDS[7]], annotations={"topos.io/numa-policy": "single-numa"}
        ),
    ]
    found = check_state(2, pods, [node()])
    assert sorted(kinds(found)) == ["no-such-node", "numa-split", "unknown-gpu"]
    assert "round 2: unknown-gpu: pod made-up, node n1, uuid GPU-made-up" in report(found, seed=9)
    assert "with seed 9" in report(found, seed=9)


def test_a_reason_is_a_false_condition_or_an_event_about_this_uid() -> None:
    pod = gpu_pod("p", 1)
    pod["metadata"]["uid"] = "new"
    assert not has_reason(pod, {"old"})  # an Event about the deleted pod of the same name
    assert has_reason(pod, {"new"})
    pod["status"] = {"conditions": [{"type": "PodScheduled", "status": "False"}]}
    assert has_reason(pod)


def test_a_pod_deleted_behind_the_harness_back_or_replaced_under_its_name_has_vanished() -> None:
    pods = [bound("kept", 1, UUIDS[:1]), bound("renamed", 1, UUIDS[1:2])]
    pods[1]["metadata"]["uid"] = "uid-someone-else"
    created = {"kept": "uid-kept", "renamed": "uid-renamed", "gone": "uid-gone"}
    found = vanished(7, created, pods)
    assert [(v.kind, v.pod) for v in found] == [("vanished", "gone"), ("vanished", "renamed")]
    assert "no pod of that name" in found[0].detail
    assert "uid-some" in found[1].detail
    assert vanished(7, {"kept": "uid-kept"}, pods) == []
