"""Recovery on the real control plane: a GPU under a running gang fails, a node goes NotReady, an
agent goes silent — the affected members are evicted, the workload controller (played by the
test) recreates them, and the gang runs again whole, placed with the fewest moves.

The time from the failure to every member bound again is printed (target: under 30 s).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from common.kube import NAMESPACES, NODES, PODS
from common.wire import GpuState
from coordinator.inventory.store import Inventory
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod
from tests.support.inventory_wait import until
from tests.support.polling import eventually


async def test_a_gpu_failure_moves_only_the_broken_member_inside_the_leaf(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with Controllers(cluster), cluster.gang_coordinator() as coord:
        owner = await cluster.job("train")
        for k in range(3):
            await cluster.create(gang_pod(f"w-{k}", "train", 3, recreate=True, owner=owner))
        before = await cluster.all_bound("topos.io/gang=train", 3)
        victim = await cluster.pod("w-1")
        node = victim["spec"]["nodeName"]
        uuid = victim["metadata"]["annotations"]["topos.io/assigned-gpus"].split(",")[3]
        index = next(g.index for g in cluster.topologies[node].gpus if g.uuid == uuid)
        original = victim["metadata"]["uid"]
        failed_at = time.monotonic()
        # The node's agent reports an XID on one of w-1's GPUs.
        coord.inventory.apply_delta(
            node,
            seq=1,
            gpus=(GpuState(index=index, uuid=uuid, healthy=False, health_reason="XID 79"),),
            allocations=None,
        )
        after = await cluster.all_bound("topos.io/gang=train", 3, replaced={"w-1": original})
        took = time.monotonic() - failed_at
        print(f"\nGPU failure -> gang running again (all 3 members bound): {took:.2f} s")
        assert after["w-0"] == before["w-0"]  # fewest moves: the healthy members stayed
        assert after["w-2"] == before["w-2"]
        assert after["w-1"] != node  # 7 healthy GPUs left there: too few for 8
        assert cluster.leaf_of[after["w-1"]] == cluster.leaf_of[before["w-0"]]  # same leaf
        event = await cluster.event("Rescheduled", name="w-1")
        assert f"GPU {uuid} on node {node} is unhealthy" in event["message"]
        assert "1 of 3 members move" in event["message"]
        # …and says where the replacement goes, and that it is the gang's own leaf
        leaf = cluster.leaf_of[before["w-0"]]
        assert f"goes to {after['w-1']}, inside the gang's own leaf {leaf}" in event["message"]
        records = coord.gangs.step.recoveries
        assert [r.gang for r in records] == [f"{cluster.namespace}/train"]


async def test_a_node_going_notready_moves_its_member(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with Controllers(cluster), cluster.gang_coordinator():
        owner = await cluster.job("train")
        for k in range(4):
            await cluster.create(gang_pod(f"w-{k}", "train", 4, recreate=True, owner=owner))
        before = await cluster.all_bound("topos.io/gang=train", 4)
        down = before["w-2"]
        original = (await cluster.pod("w-2"))["metadata"]["uid"]
        # A pod another scheduler put on that node is not ours to move.
        other = await cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "not-ours"},
                "spec": {
                    "nodeName": down,
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            }
        )
        failed_at = time.monotonic()
        await cluster.set_node_ready(down, False)
        after = await cluster.all_bound("topos.io/gang=train", 4, replaced={"w-2": original})
        took = time.monotonic() - failed_at
        print(f"\nnode NotReady -> gang running again (all 4 members bound): {took:.2f} s")
        assert down not in after.values()
        # Fewest moves: the three healthy members stay; the leaf is full, so w-2 goes to the
        # next leaf of the same spine.
        assert all(after[f"w-{k}"] == before[f"w-{k}"] for k in (0, 1, 3))
        assert cluster.spine_of[after["w-2"]] == cluster.spine_of[down]
        event = await cluster.event("Rescheduled", name="w-2")
        assert f"node {down} is NotReady" in event["message"]
        assert "1 of 4 members move" in event["message"]
        still = await cluster.pod("not-ours")
        assert still["metadata"]["uid"] == other["metadata"]["uid"]
        assert "deletionTimestamp" not in still["metadata"]


async def test_a_deleted_node_moves_its_member_and_its_pod_goes(cluster: GangCluster) -> None:
    """No PodGC runs here (nor in the playground): without recovery the member would stay bound
    to the missing Node for good, and a graceful eviction would leave it Terminating for good,
    no kubelet being left to confirm it stopped."""
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with Controllers(cluster) as controllers, cluster.gang_coordinator():
        owner = await cluster.job("train")
        for k in range(4):
            await cluster.create(gang_pod(f"w-{k}", "train", 4, recreate=True, owner=owner))
        before = await cluster.all_bound("topos.io/gang=train", 4)
        deleted = before["w-1"]
        original = (await cluster.pod("w-1"))["metadata"]["uid"]
        controllers.no_kubelet.add(deleted)
        await cluster.kube.delete(NODES, deleted)
        after = await cluster.all_bound("topos.io/gang=train", 4, replaced={"w-1": original})
        assert deleted not in after.values()
        assert all(after[f"w-{k}"] == before[f"w-{k}"] for k in (0, 2, 3))  # fewest moves
        event = await cluster.event("Rescheduled", name="w-1")
        assert event["type"] == "Warning"
        assert f"node {deleted} was deleted (its Node object is gone)" in event["message"]
        assert "1 of 4 members move" in event["message"]
        # What `kubectl describe pod w-1` shows of it: the replacement's GangScheduled Event.
        uid = (await cluster.pod("w-1"))["metadata"]["uid"]

        async def scheduled_again() -> list[Any]:
            found = await cluster.events(name="w-1", reason="GangScheduled")
            return [e for e in found if e["involvedObject"].get("uid") == uid]

        (scheduled,) = await eventually(scheduled_again, what="GangScheduled on the replacement")
        assert f"s after node {deleted} was deleted" in scheduled["message"]


async def test_a_stale_agent_moves_its_member_and_the_others_stay(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=4)
    async with Controllers(cluster), cluster.gang_coordinator(stale_ttl_s=30) as coord:
        owner = await cluster.job("pair")
        for k in range(2):
            await cluster.create(gang_pod(f"w-{k}", "pair", 2, recreate=True, owner=owner))
        before = await cluster.all_bound("topos.io/gang=pair", 2)
        silent = before["w-0"]
        original = (await cluster.pod("w-0"))["metadata"]["uid"]
        # An empty node falls silent at the same moment: it is no cause of this gang's move.
        empty = sorted(set(cluster.topologies) - set(before.values()))[0]
        # Every other agent keeps talking; 31 s pass on the inventory's clock.
        coord.clock.now += 31
        for name in cluster.topologies:
            if name not in (silent, empty):
                coord.inventory.touch(name)
        assert sorted(coord.inventory.sweep()) == sorted([silent, empty])
        after = await cluster.all_bound("topos.io/gang=pair", 2, replaced={"w-0": original})
        assert after["w-1"] == before["w-1"]
        assert after["w-0"] != silent
        event = await cluster.event("Rescheduled", name="w-0")
        assert f"the agent on node {silent} is silent past its TTL" in event["message"]
        assert empty not in event["message"]


async def test_recovery_keeps_to_the_coordinators_namespace(
    cluster: GangCluster, unique_name: Callable[[str], str]
) -> None:
    """A coordinator scheduling one namespace moves its own pods off a failed node and leaves
    another namespace's pod on that node to whoever owns it."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=4)
    other = unique_name("t-elsewhere")
    await cluster.kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    async with Controllers(cluster), cluster.gang_coordinator() as coord:
        owner = await cluster.job("pair")
        for k in range(2):
            await cluster.create(gang_pod(f"w-{k}", "pair", 2, recreate=True, owner=owner))
        before = await cluster.all_bound("topos.io/gang=pair", 2)
        down = before["w-0"]
        original = (await cluster.pod("w-0"))["metadata"]["uid"]
        foreign = gang_pod("theirs-0", "theirs", 1, gpus=0)
        foreign["spec"] = {
            **foreign["spec"],
            "schedulerName": "default-scheduler",
            "nodeName": down,
        }
        await cluster.kube.create(PODS, foreign, namespace=other)
        await until(coord.inventory, lambda: down in _nodes_holding(coord.inventory, other))
        await cluster.set_node_ready(down, False)
        after = await cluster.all_bound("topos.io/gang=pair", 2, replaced={"w-0": original})
        assert after["w-0"] != down
        await coord.runtime.scheduler.drain()  # every eviction and Event written
    theirs = await cluster.kube.get(PODS, "theirs-0", namespace=other)
    assert not theirs["metadata"].get("deletionTimestamp"), "another namespace's pod was evicted"
    assert theirs["spec"]["nodeName"] == down


def _nodes_holding(inventory: Inventory, namespace: str) -> set[str]:
    return {
        name
        for name in inventory.names()
        if any(p.namespace == namespace for p in inventory.bound_pods(name))
    }
