"""A gang that loses a race while its binds are on the wire (a member deleted and recreated by its
controller mid-bind), on the in-memory cluster: the other member's bind lands after the gang gave
up; that member is bare (nothing would create it again), so it is kept, not evicted for good; and
the replacement is tried again right after the gang's backoff — never after the 60 s
unschedulable flush."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.ports import PodRef
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


class GatedCluster(MemoryCluster):
    """Holds the first bind of each pod in ``gates`` until the test opens its gate."""

    def __init__(self, inventory: Inventory, hold: tuple[str, ...]) -> None:
        super().__init__(inventory)
        self.gates = {key: asyncio.Event() for key in hold}
        self.held: set[str] = set()

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        gate = self.gates.pop(pod.key, None)
        if gate is not None:
            self.held.add(pod.key)
            await gate.wait()
        await super().bind(pod, node, annotations)


def member(name: str, uid: str) -> dict[str, Any]:
    return pod(name, namespace="ml", uid=uid, gang=("g", 2), gpus=8, cpu=None, memory=None)


@pytest.fixture
async def gated(request: pytest.FixtureRequest) -> AsyncIterator[tuple[GatedCluster, GangRuntime]]:
    """The binds held (default: both members'), the gang's backoff (default: 0.5 s)."""
    hold, backoff_s = getattr(request, "param", (("ml/g-0", "ml/g-1"), 0.5))
    inventory = Inventory(stale_ttl_s=3600)
    cluster = GatedCluster(inventory, hold=hold)
    for name in ("h100-0", "h100-1"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05, backoff_s=backoff_s))
    async with runtime, gangs:
        yield cluster, gangs


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("ml", name)
    return None if obj is None else obj["spec"].get("nodeName")


async def seconds_until_both_bound(cluster: MemoryCluster) -> float:
    """Seconds until g-0 and g-1 are both bound, waiting long enough for the 60 s unschedulable
    flush (which the callers' assertions refuse)."""
    started = time.monotonic()
    await eventually(
        lambda: node_of(cluster, "g-0") and node_of(cluster, "g-1"),
        what="both members bound",
        timeout_s=70,
    )
    return time.monotonic() - started


async def test_a_member_bound_after_its_gang_gave_up_is_kept_and_the_gang_completes(
    gated: tuple[GatedCluster, GangRuntime],
) -> None:
    cluster, gangs = gated
    gate_0, gate_1 = cluster.gates["ml/g-0"], cluster.gates["ml/g-1"]
    uid_0 = cluster.create_pod(member("g-0", "uid-g-0"))["metadata"]["uid"]
    cluster.create_pod(member("g-1", "uid-g-1"))
    await eventually(
        lambda: cluster.held == {"ml/g-0", "ml/g-1"}, what="both binds on the wire", timeout_s=10
    )
    # Its controller replaced g-1 while the bind was on the wire: that bind must fail.
    cluster.delete_pod("ml", "g-1")
    again = cluster.create_pod(member("g-1", "uid-g-1-again"))["metadata"]["uid"]
    queue = gangs.step.scheduler.queue
    await eventually(
        lambda: (e := queue.entry(again)) is not None and e.attempts > 0,
        what="the replacement to be tried while the attempt is in flight",
        timeout_s=10,
    )
    gate_1.set()
    manager = gangs.step.manager
    await eventually(
        lambda: (
            [s.bound for s in manager.statuses()] == [0]
            and (e := queue.entry(again)) is not None
            and e.where == "unschedulable"
        ),
        what="the gang to give up, its replacement parked",
        timeout_s=10,
    )
    # g-0's bind lands after its gang gave up.
    gate_0.set()
    assert await seconds_until_both_bound(cluster) < 10  # after the backoff, not the 60 s flush
    replacement = cluster.pod("ml", "g-1")
    assert replacement is not None
    assert replacement["metadata"]["uid"] == again
    first = cluster.pod("ml", "g-0")
    assert first is not None
    assert first["metadata"]["uid"] == uid_0  # the bare member was never evicted
    assert {node_of(cluster, "g-0"), node_of(cluster, "g-1")} == {"h100-0", "h100-1"}
    assert [(s.phase, s.members, s.bound) for s in manager.statuses()] == [("Bound", 2, 2)]
    assert not [e for e in cluster.events("ml", "g-0") if e["reason"] == "GangReleased"]
    kept = [e for e in cluster.events("ml", "g-0") if e["reason"] == "GangMemberKept"]
    assert kept
    assert "no controller that would create it again" in kept[0]["message"]


# Only g-1's bind held, and a gang backoff longer than the replacement's own queue backoff: the
# replacement, woken by the room the release freed, is tried while the gang still backs off and
# parked again; it is tried once more when the backoff ends.
@pytest.mark.parametrize("gated", [(("ml/g-1",), 6.0)], ids=["g-1-held"], indirect=True)
async def test_a_gang_whose_member_was_replaced_mid_bind_completes_after_its_backoff(
    gated: tuple[GatedCluster, GangRuntime],
) -> None:
    cluster, gangs = gated
    gate = cluster.gates["ml/g-1"]
    cluster.create_pod(member("g-0", "uid-g-0"))
    cluster.create_pod(member("g-1", "uid-g-1"))
    await eventually(lambda: cluster.held == {"ml/g-1"}, what="g-1's bind on the wire")
    cluster.delete_pod("ml", "g-1")
    again = cluster.create_pod(member("g-1", "uid-g-1-again"))["metadata"]["uid"]
    queue = gangs.step.scheduler.queue
    await eventually(
        lambda: (e := queue.entry(again)) is not None and e.attempts > 0,
        what="the replacement to be tried while the attempt is in flight",
        timeout_s=10,
    )
    gate.set()
    assert await seconds_until_both_bound(cluster) < 20  # after the 6 s backoff, not the 60 s flush
    replacement = cluster.pod("ml", "g-1")
    assert replacement is not None
    assert replacement["metadata"]["uid"] == again
    status = gangs.step.manager.statuses()
    assert [(s.phase, s.members, s.bound) for s in status] == [("Bound", 2, 2)]


# A group of one pod at a time (a Deployment's replicas: minimum 1), the first replica's bind
# held: the replicas popped meanwhile wait for it without a FailedScheduling Event, and bind
# beside it once it lands.
@pytest.mark.parametrize("gated", [(("ml/r-0",), 0.5)], ids=["r-0-held"], indirect=True)
async def test_replicas_popped_while_the_first_binds_wait_quietly(
    gated: tuple[GatedCluster, GangRuntime],
) -> None:
    cluster, gangs = gated
    gate = cluster.gates["ml/r-0"]
    replicas = [
        pod(f"r-{i}", namespace="ml", gang=("r", 1), gpus=2, cpu=None, memory=None)
        for i in range(3)
    ]
    for obj in replicas:
        obj["metadata"].setdefault("annotations", {})["topos.io/placement"] = "consolidated"
    cluster.create_pod(replicas[0])
    await eventually(lambda: cluster.held == {"ml/r-0"}, what="r-0's bind on the wire")
    for obj in replicas[1:]:
        cluster.create_pod(obj)
    queue = gangs.step.scheduler.queue
    await eventually(
        lambda: all((e := queue.named(f"ml/r-{i}")) is not None and e.attempts > 0 for i in (1, 2)),
        what="the other replicas tried while r-0's bind is on the wire",
        timeout_s=10,
    )
    gate.set()
    await eventually(
        lambda: all(node_of(cluster, f"r-{i}") for i in range(3)),
        what="every replica bound",
        timeout_s=10,
    )
    assert len({node_of(cluster, f"r-{i}") for i in range(3)}) == 1  # consolidated
    failed = [
        (name, e["message"])
        for name in ("r-0", "r-1", "r-2")
        for e in cluster.events("ml", name)
        if e["reason"] == "FailedScheduling"
    ]
    assert failed == []
