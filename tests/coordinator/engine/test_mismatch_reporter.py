"""The GPU-mismatch reporter over the inventory: one Warning Event per new or changed mismatch,
none while it may not write (a standby replica), a failed write tried again, a pod that left
forgotten; running, woken only by nodes that can have one; and the scheduler counting a pod on
the GPUs the node really gave it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import pytest

from agent.devices import discover_profile
from common.model import NodeTopology
from common.wire import ContainerAllocation
from coordinator.engine.mismatches import REASON_MISMATCH, MismatchReporter
from coordinator.engine.ports import ClusterError, PodRef
from coordinator.engine.view import ClusterView
from coordinator.inventory.mismatch import GpuMismatch
from coordinator.inventory.state import BoundPod, KubeNode
from coordinator.inventory.store import Inventory
from tests.support.clock import ManualClock
from tests.support.stream_frames import allocation

NODE = "dgx1"


class Events:
    """A ``ClusterWriter`` that records Events (and fails when told to)."""

    def __init__(self) -> None:
        self.written: list[tuple[PodRef, str, str, str]] = []
        self.failing = False

    async def event(
        self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        if self.failing:
            raise ClusterError("API server down")
        self.written.append((pod, reason, message, event_type))

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None: ...
    async def explain(self, pod: PodRef, message: str, *, nominated: str = "") -> bool:
        return False

    async def record_scheduled(self, pod: PodRef, message: str) -> None: ...
    async def evict(self, pod: PodRef) -> None: ...


@pytest.fixture
def dgx1() -> NodeTopology:
    return discover_profile("dgx1-v100", hostname=NODE)


def _inventory(topo: NodeTopology) -> Inventory:
    inv = Inventory(clock=ManualClock())
    inv.upsert_node(KubeNode(name=NODE, allocatable={"nvidia.com/gpu": 8, "pods": 110}))
    inv.apply_hello(NODE, agent_id="a", agent_version="t", seq=0, topology=topo, allocations=())
    return inv


def _place(inv: Inventory, topo: NodeTopology, name: str, *gpus: int) -> None:
    uuids = tuple(topo.gpus[i].uuid for i in gpus)
    inv.upsert_pod(
        BoundPod(
            uid=f"uid-{name}",
            namespace="ml",
            name=name,
            node=NODE,
            scheduler="topos",
            requests={"nvidia.com/gpu": len(gpus)},
            assigned_gpus=uuids,
        )
    )


def _give(inv: Inventory, topo: NodeTopology, seq: int, **pods: tuple[int, ...]) -> None:
    held: tuple[ContainerAllocation, ...] = tuple(
        allocation(name, *(topo.gpus[i].uuid for i in gpus), namespace="ml")
        for name, gpus in pods.items()
    )
    inv.apply_delta(NODE, seq=seq, gpus=(), allocations=held)


async def test_one_event_per_new_or_changed_mismatch(dgx1: NodeTopology) -> None:
    inv, events = _inventory(dgx1), Events()
    counted: list[tuple[str, GpuMismatch]] = []
    reporter = MismatchReporter(inv, events, on_reported=lambda n, m: counted.append((n, m)))
    _place(inv, dgx1, "train", 0, 3)
    _give(inv, dgx1, 1, train=(0, 4))
    assert await reporter.check([NODE]) == 1
    ((pod, reason, message, kind),) = events.written
    assert (pod, reason, kind) == (PodRef("ml", "train", "uid-train"), REASON_MISMATCH, "Warning")
    assert message.startswith(
        "assigned GPUs 0,3 (NV2) but the node gave GPUs 0,4 (SYS) on node dgx1: "
    )
    assert await reporter.check([NODE]) == 0  # the agent reports again: nothing new
    _give(inv, dgx1, 2, train=(4, 0))  # the same devices, listed otherwise
    assert await reporter.check([NODE]) == 0
    _give(inv, dgx1, 3, train=(6, 7))
    assert await reporter.check([NODE]) == 1
    assert "the node gave GPUs 6,7 (NV1)" in events.written[-1][2]
    assert [(n, m.link_change) for n, m in counted] == [(NODE, "worse"), (NODE, "worse")]


async def test_nothing_is_written_while_inactive_and_a_failed_write_is_tried_again(
    dgx1: NodeTopology,
) -> None:
    inv, events = _inventory(dgx1), Events()
    leading = False
    reporter = MismatchReporter(inv, events, active=lambda: leading)
    _place(inv, dgx1, "train", 0, 3)
    _give(inv, dgx1, 1, train=(0, 4))
    assert await reporter.check([NODE]) == 0
    leading, events.failing = True, True
    assert await reporter.check([NODE]) == 0
    events.failing = False
    assert await reporter.check([NODE]) == 1
    assert len(events.written) == 1


async def test_a_pod_that_left_is_forgotten(dgx1: NodeTopology) -> None:
    inv, events = _inventory(dgx1), Events()
    reporter = MismatchReporter(inv, events)
    _place(inv, dgx1, "train", 0, 3)
    _give(inv, dgx1, 1, train=(0, 4))
    assert await reporter.check([NODE]) == 1
    inv.delete_pod("uid-train")
    assert await reporter.check([NODE]) == 0
    _place(inv, dgx1, "train", 0, 3)  # bound again: the agent's old word on it does not count
    assert await reporter.check([NODE]) == 0
    _give(inv, dgx1, 2, train=(6, 7))  # its next report: mis-served again, and news again
    assert await reporter.check([NODE]) == 1


async def test_the_scheduler_counts_a_pod_on_the_gpus_the_node_gave_it(
    dgx1: NodeTopology,
) -> None:
    inv = _inventory(dgx1)
    _place(inv, dgx1, "train", 0, 3)
    _give(inv, dgx1, 1, train=(0, 4), theirs=(5,))
    inv.upsert_pod(
        BoundPod(
            uid="u-theirs", namespace="ml", name="theirs", node=NODE, requests={"nvidia.com/gpu": 1}
        )
    )
    view = ClusterView(inv)
    info = view.snapshot().get(NODE)
    assert info is not None
    held = {p.name: set(p.device_ids) for p in info.pods}
    assert held["train"] == {dgx1.gpus[0].uuid, dgx1.gpus[4].uuid}
    assert held["theirs"] == {dgx1.gpus[5].uuid}  # default-scheduler pods too: the kubelet's word


async def test_running_it_reports_at_once_and_ignores_nodes_without_an_agent(
    dgx1: NodeTopology,
) -> None:
    """Running, it wakes for a change on a node whose agent reports holdings (no waiting for the
    resync) and for none on a node without an agent, whose every bound pod is a change."""
    inv, events = _inventory(dgx1), Events()
    inv.upsert_node(KubeNode(name="kwok-0", allocatable={"cpu": 4000, "pods": 110}))
    reporter = MismatchReporter(inv, events, resync_s=3600)
    passes: list[list[str]] = []
    check = reporter.check

    async def counted(nodes: list[str]) -> int:
        passes.append(list(nodes))
        return await check(nodes)

    reporter.check = counted  # type: ignore[method-assign]
    task = asyncio.create_task(reporter.run())
    try:
        await _turns()
        assert passes == [inv.names()]  # the first pass: every node
        for i in range(50):
            inv.upsert_pod(BoundPod(uid=f"u-{i}", namespace="ml", name=f"p{i}", node="kwok-0"))
            await _turns()
        assert len(passes) == 1  # 50 pods bound on the agent-less node: not woken once
        _place(inv, dgx1, "train", 0, 3)
        _give(inv, dgx1, 1, train=(0, 4))
        await _turns()
        assert passes[1:] == [[NODE]]
        assert [(pod.name, reason) for pod, reason, _, _ in events.written] == [
            ("train", REASON_MISMATCH)
        ]
        # The agent stops reporting holdings; the pod then leaves the node it was reported on:
        # that still wakes it, and the pod is forgotten (mis-served again later: news again).
        inv.apply_hello(NODE, agent_id="a", agent_version="t", seq=0, topology=dgx1, allocations=())
        await _turns()
        before = len(passes)
        inv.delete_pod("uid-train")
        await _turns()
        assert passes[before:] == [[NODE]]
        _place(inv, dgx1, "train", 0, 3)
        _give(inv, dgx1, 1, train=(6, 7))
        await _turns()
        assert [(pod.name, reason) for pod, reason, _, _ in events.written] == [
            ("train", REASON_MISMATCH),
            ("train", REASON_MISMATCH),
        ]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _turns() -> None:
    for _ in range(5):
        await asyncio.sleep(0)
