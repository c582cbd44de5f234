"""A gang whose pods name a GPU model (nodeSelector) on a mixed cluster: the planner knows from
the start which nodes the members may use, so the gang is placed at once even when many bigger,
emptier nodes of another model come first — and when it does not fit, the message counts the
nodes that don't match."""

from __future__ import annotations

from typing import Any

from coordinator.core.framework.status import Status
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot

PRODUCT = "nvidia.com/gpu.product"


def member(i: int, product: str) -> PodRequest:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"m-{i}",
            "namespace": "ml",
            "labels": {"topos.io/gang": "ft", "topos.io/gang-min": "2"},
        },
        "spec": {
            "schedulerName": "topos",
            "nodeSelector": {PRODUCT: product},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        },
    }
    parsed = parse_pod(pod)
    assert isinstance(parsed, PodRequest)
    return parsed


def node(name: str, product: str, gpus: int) -> NodeInfo:
    return NodeInfo.build(
        name,
        labels={"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1", PRODUCT: product},
        allocatable={"nvidia.com/gpu": gpus, "cpu": 64_000, "memory": 2**38, "pods": 110},
    )


def cluster() -> Snapshot:
    # Twelve roomy nodes of another model, then two small ones of the model the gang asks for.
    nodes = [node(f"a-{i:02d}", "A100", 8) for i in range(12)]
    nodes += [node("h-01", "H100", 4), node("h-02", "H100", 4)]
    return Snapshot(nodes)


def test_gang_with_a_node_selector_is_placed_in_the_first_round() -> None:
    decided = schedule_gang([member(0, "H100"), member(1, "H100")], cluster(), build_framework())
    assert isinstance(decided, GangDecision)
    assert {d.node for d in decided.decisions} == {"h-01", "h-02"}
    assert decided.rounds == 1


def test_gang_of_a_model_nobody_has_says_so() -> None:
    result = schedule_gang([member(0, "B200"), member(1, "B200")], cluster(), build_framework())
    assert isinstance(result, Status)
    assert not result.is_success
    assert "14 node(s) didn't match Pod's node affinity/selector" in result.message
