"""A node's topology seeded from its Node annotation (``topos.io/topology``) while no agent stream
describes it: shown as such, used at once, never stale for want of a stream, never newer than a
stream — and a malformed or oversized annotation leaves only that node without a topology, with
the reason shown."""

from __future__ import annotations

import json

from common import labels
from common.model import NodeTopology, topology_to_json
from coordinator.engine.view import ClusterView
from coordinator.inventory.state import KubeNode
from coordinator.inventory.store import Inventory, InventoryEvent
from coordinator.inventory.translate import TopologyMemo, kube_node
from tests.support.clock import ManualClock
from tests.support.stream_frames import topology, with_gpu


def _node(
    name: str,
    published: NodeTopology | str | None,
    *,
    ready: bool = True,
    memo: TopologyMemo | None = None,
) -> KubeNode:
    if isinstance(published, NodeTopology):
        published = topology_to_json(published).decode()
    annotations = {} if published is None else {labels.TOPOLOGY: published}
    return kube_node(
        {
            "metadata": {"name": name, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        },
        memo,
    )


def _hello(inv: Inventory, name: str, topo: NodeTopology) -> None:
    inv.apply_hello(
        name, agent_id=f"agent-{name}", agent_version="t", seq=0, topology=topo, allocations=()
    )


def test_a_node_with_only_its_annotation_is_scheduled_at_once_and_never_goes_stale() -> None:
    clock = ManualClock(0.0)
    inv = Inventory(stale_ttl_s=30.0, clock=clock)  # the default: no start-up grace
    inv.upsert_node(_node("dgx-1", topology("dgx-1", gpus=8)))
    state = inv.node("dgx-1")
    assert state is not None
    assert state.topology_source == "annotation"
    assert state.topology == topology("dgx-1", gpus=8)
    assert state.schedulable
    assert not state.connected
    assert state.free["nvidia.com/gpu"] == 8  # allocatable from the published hardware
    assert list(ClusterView(inv).snapshot().node_names()) == ["dgx-1"]
    clock.now += 3600  # no stream ever: no agent silence to count
    assert inv.sweep() == []
    assert inv.node("dgx-1").schedulable  # type: ignore[union-attr]
    inv.upsert_node(_node("dgx-1", topology("dgx-1", gpus=8), ready=False))
    assert not inv.node("dgx-1").schedulable  # type: ignore[union-attr]  # NotReady still counts


def test_a_stream_always_wins_over_the_annotation() -> None:
    inv = Inventory(clock=ManualClock(0.0))
    published = topology("dgx-1", gpus=4)
    streamed = with_gpu(published, 1, healthy=False, health_reason="XID 79")
    inv.upsert_node(_node("dgx-1", published))
    _hello(inv, "dgx-1", streamed)
    state = inv.node("dgx-1")
    assert state is not None
    assert (state.topology_source, state.topology) == ("stream", streamed)
    assert state.free["nvidia.com/gpu"] == 3  # the stream's unhealthy GPU is not handed out
    # The agent publishes again (or someone edits the Node) while the stream is connected.
    inv.upsert_node(_node("dgx-1", topology("dgx-1", gpus=2)))
    state = inv.node("dgx-1")
    assert state is not None
    assert (state.topology_source, state.topology) == ("stream", streamed)


def test_a_closed_stream_keeps_its_word_until_the_annotation_changes() -> None:
    clock = ManualClock(0.0)
    inv = Inventory(stale_ttl_s=30.0, clock=clock)
    events: list[InventoryEvent] = []
    inv.subscribe(events.append)
    published = topology("dgx-1", gpus=4)
    streamed = with_gpu(published, 0, healthy=False, health_reason="XID 79")
    inv.upsert_node(_node("dgx-1", published))
    _hello(inv, "dgx-1", streamed)
    inv.agent_disconnected("dgx-1", "agent-dgx-1")
    # A Node heartbeat with the same (older) annotation does not undo the stream's report.
    inv.upsert_node(_node("dgx-1", published, ready=True))
    state = inv.node("dgx-1")
    assert state is not None
    assert (state.topology_source, state.topology, state.connected) == ("stream", streamed, False)
    clock.now += 31
    assert inv.sweep() == ["dgx-1"]  # a stream gone silent: stale, as before
    assert not inv.node("dgx-1").schedulable  # type: ignore[union-attr]
    # `topos agent --once` publishes what the node has now: newer than the closed stream.
    events.clear()
    healed = with_gpu(published, 0, memory_free_mib=40960)
    inv.upsert_node(_node("dgx-1", healed))
    state = inv.node("dgx-1")
    assert state is not None
    assert (state.topology_source, state.topology) == ("annotation", healed)
    assert state.schedulable
    assert not state.stale
    assert state.free["nvidia.com/gpu"] == 4
    assert events == [InventoryEvent("recovered", "dgx-1", capacity_gained=True)]
    clock.now += 3600
    assert inv.sweep() == []
    # The agent's stream comes back: its word wins again.
    _hello(inv, "dgx-1", streamed)
    assert inv.node("dgx-1").topology_source == "stream"  # type: ignore[union-attr]


def test_a_malformed_or_oversized_annotation_leaves_that_node_alone_without_a_topology() -> None:
    inv = Inventory(clock=ManualClock(0.0))
    memo = TopologyMemo()
    good = topology_to_json(topology("good", gpus=2)).decode()
    duplicate = json.loads(topology_to_json(topology("dup", gpus=2)))
    duplicate["gpus"][1]["uuid"] = duplicate["gpus"][0]["uuid"]
    oversized = good + " " * (labels.TOPOLOGY_ANNOTATION_MAX_BYTES + 1)  # still valid JSON
    inv.upsert_node(_node("good", good, memo=memo))
    inv.upsert_node(_node("broken", "{not json", memo=memo))
    inv.upsert_node(_node("dup", json.dumps(duplicate), memo=memo))
    inv.upsert_node(_node("huge", oversized, memo=memo))
    errors = {}
    for name in ("broken", "dup", "huge"):
        state = inv.node(name)
        assert state is not None
        assert state.topology is None
        assert state.topology_source is None
        assert state.free.get("nvidia.com/gpu", 0) == 0  # no GPU pod goes there blind
        assert state.annotation_error is not None
        errors[name] = state.annotation_error
    assert errors["broken"].startswith("topos.io/topology ignored: invalid topology")
    assert "GPU 1 and GPU 0 share UUID GPU-dup-0" in errors["dup"]
    assert f"over the {labels.TOPOLOGY_ANNOTATION_MAX_BYTES}-byte limit" in errors["huge"]
    # The same text again (a Node heartbeat) keeps its reason without being parsed again.
    assert _node("broken", "{not json", memo=memo).topology_error == errors["broken"]
    state = inv.node("good")
    assert state is not None
    assert state.topology_source == "annotation"
    assert state.annotation_error is None
    assert state.free["nvidia.com/gpu"] == 2
