"""A gang whose pods name a GPU model (nodeSelector) on a mixed cluster: the planner knows from
the start which nodes the members may use, so the gang is placed at once even when many bigger,
emptier nodes of another model come first — and when it does not fit, the message counts the
nodes that don't match."""

from __future__ import annotations

from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from devcluster.pods import gang_members
from tests.support.sched_hw import dgx_h100, gpu_node, request, ws4

PRODUCT = "nvidia.com/gpu.product"


def members(product: str) -> list[PodRequest]:
    """Two 4-GPU members of gang "ft" (min 2) asking for ``product`` by node selector."""
    pods = gang_members(
        "ft",
        2,
        prefix="m",
        namespace="ml",
        gpus=4,
        cpu=None,
        memory=None,
        node_selector={PRODUCT: product},
    )
    return [request(obj) for obj in pods]


def node(name: str, product: str, gpus: int) -> NodeInfo:
    labels = {"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1", PRODUCT: product}
    topo = dgx_h100(name) if gpus == 8 else ws4(name)
    return gpu_node(name, topo, labels=labels)


def cluster() -> Snapshot:
    # Twelve roomy nodes of another model, then two small ones of the model the gang asks for.
    nodes = [node(f"a-{i:02d}", "A100", 8) for i in range(12)]
    nodes += [node("h-01", "H100", 4), node("h-02", "H100", 4)]
    return Snapshot(nodes)


def test_gang_with_a_node_selector_is_placed_in_the_first_round() -> None:
    decided = schedule_gang(members("H100"), cluster(), build_framework())
    assert isinstance(decided, GangDecision)
    assert {d.node for d in decided.decisions} == {"h-01", "h-02"}
    assert decided.rounds == 1


def test_gang_of_a_model_nobody_has_says_so() -> None:
    result = schedule_gang(members("B200"), cluster(), build_framework())
    assert isinstance(result, Status)
    assert not result.is_success
    assert "14 node(s) didn't match Pod's node affinity/selector" in result.message
