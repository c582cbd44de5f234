"""The API server decides which nodes exist: agent reports for names without a Node object are no
placement target, expire after a bounded time and are capped in number; after start-up, nodes whose
agent is not back yet have no topology until the grace ends, then the one their agent published on
the Node."""

from __future__ import annotations

import json

import pytest

from common import labels
from common.model import topology_to_json
from common.wire import CloseReason, FrameError
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.engine.view import ClusterView
from coordinator.inventory.state import KubeNode
from coordinator.inventory.store import MAX_UNKNOWN_NODES, Inventory, InventoryEvent
from coordinator.inventory.translate import kube_node
from tests.support.clock import ManualClock
from tests.support.stream_frames import topology, with_gpu


def _hello(inv: Inventory, node: str) -> None:
    inv.apply_hello(
        node,
        agent_id=f"agent-{node}",
        agent_version="test",
        seq=0,
        topology=topology(node, gpus=4),
        allocations=(),
    )


def _node_object(name: str, *, published: str | None = None) -> KubeNode:
    annotations = {} if published is None else {labels.TOPOLOGY: published}
    return kube_node(
        {
            "metadata": {"name": name, "annotations": annotations},
            "status": {
                "allocatable": {"nvidia.com/gpu": "4", "cpu": "32", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def test_an_agent_alone_makes_no_placement_target_and_counts_as_no_node() -> None:
    inv = Inventory(clock=ManualClock(0.0))
    view = ClusterView(inv)
    _hello(inv, "ghost-dgx")
    inv.upsert_node(_node_object("real"))
    _hello(inv, "real")
    assert list(view.snapshot().node_names()) == ["real"]  # "0/1 nodes", not "0/2"
    inv.delete_node("real")  # kubectl delete node, its agent still streaming
    assert not inv.node("real").schedulable  # type: ignore[union-attr]
    assert list(view.snapshot().node_names()) == []
    assert inv.unknown_nodes() == ["ghost-dgx", "real"]


def test_unknown_nodes_expire_after_their_ttl_unless_a_node_object_appears() -> None:
    clock = ManualClock(0.0)
    inv = Inventory(unknown_node_ttl_s=60.0, clock=clock)
    events: list[InventoryEvent] = []
    inv.subscribe(events.append)
    _hello(inv, "ghost-dgx")
    _hello(inv, "late-node")
    clock.now += 30
    inv.upsert_node(_node_object("late-node"))  # its object arrived in time
    assert inv.expire_unknown() == []
    clock.now += 31
    assert inv.expire_unknown() == ["ghost-dgx"]
    assert "ghost-dgx" not in inv
    assert events[-1] == InventoryEvent("removed", "ghost-dgx")
    assert inv.node("late-node").schedulable  # type: ignore[union-attr]
    # The expired ghost's GPUs are free for a real node to report.
    inv.upsert_node(_node_object("moved"))
    inv.apply_hello(
        "moved",
        agent_id="m",
        agent_version="t",
        seq=0,
        topology=topology("ghost-dgx", gpus=4),
        allocations=(),
    )


def test_hellos_for_too_many_unknown_nodes_are_refused() -> None:
    inv = Inventory(clock=ManualClock(0.0))
    for i in range(MAX_UNKNOWN_NODES):
        _hello(inv, f"ghost-{i}")
    with pytest.raises(FrameError) as info:
        _hello(inv, "one-more")
    assert info.value.reason is CloseReason.UNKNOWN_NODE
    _hello(inv, "ghost-7")  # a known ghost may still say hello again
    inv.upsert_node(_node_object("real"))
    _hello(inv, "real")  # and nodes the API server has are never refused
    assert len(inv.unknown_nodes()) == MAX_UNKNOWN_NODES


def test_a_refused_report_changes_nothing() -> None:
    inv = Inventory(clock=ManualClock(0.0))
    inv.upsert_node(_node_object("node-a"))
    _hello(inv, "node-a")
    before = inv.node("node-a")
    generation = inv.generation
    with pytest.raises(FrameError, match="exceeds its total"):
        inv.apply_hello(
            "node-a",
            agent_id="agent-node-a",
            agent_version="test",
            seq=1,
            topology=with_gpu(topology("node-a", gpus=4), 2, memory_free_mib=10**6),
            allocations=(),
        )
    assert inv.generation == generation
    assert inv.node("node-a") == before


def test_published_topology_is_used_only_after_the_start_up_grace() -> None:
    clock = ManualClock(0.0)
    inv = Inventory(agent_grace_s=5.0, clock=clock)
    events: list[InventoryEvent] = []
    inv.subscribe(events.append)
    published = topology_to_json(topology("node-a", gpus=4)).decode()
    inv.upsert_node(_node_object("node-a", published=published))
    inv.upsert_node(_node_object("node-b", published=published.replace("node-a", "node-b")))
    inv.upsert_node(_node_object("cpu-only"))
    assert inv.node("node-a").topology is None  # type: ignore[union-attr]
    clock.now += 1
    _hello(inv, "node-b")  # this agent is back in time: its own report counts
    assert inv.node("node-b").topology_source == "stream"  # type: ignore[union-attr]
    assert inv.grace_left_s() == 4.0
    clock.now += 4
    events.clear()
    inv.end_grace()
    state = inv.node("node-a")
    assert state is not None
    assert state.topology == topology("node-a", gpus=4)
    assert state.topology_source == "annotation"
    # The pods waiting for GPUs are woken for node-a only.
    assert events == [InventoryEvent("updated", "node-a", True)]
    assert inv.node("cpu-only").topology is None  # type: ignore[union-attr]


def test_an_invalid_published_topology_is_ignored() -> None:
    doc = json.loads(topology_to_json(topology("node-a", gpus=2)))
    doc["gpus"][1]["uuid"] = doc["gpus"][0]["uuid"]
    assert _node_object("node-a", published=json.dumps(doc)).topology is None
    assert _node_object("node-a", published="{not json").topology is None


def test_in_memory_coordinator_registers_the_nodes_its_agents_report() -> None:
    """``topos coordinator --in-memory``: no API server, so an agent's hello registers its Node
    (the kubelet's part), and the node takes pods with allocatable from its hardware."""
    inv = Inventory(clock=ManualClock(0.0))
    cluster = MemoryCluster(inv)
    stop = cluster.register_reported_nodes()
    _hello(inv, "gpu-0")
    state = inv.node("gpu-0")
    assert state is not None
    assert state.schedulable
    assert state.ready is True
    assert state.free["nvidia.com/gpu"] == 4
    assert cluster.node("gpu-0") is not None
    assert inv.unknown_nodes() == []
    stop()
    _hello(inv, "gpu-1")
    assert not inv.node("gpu-1").schedulable  # type: ignore[union-attr]
