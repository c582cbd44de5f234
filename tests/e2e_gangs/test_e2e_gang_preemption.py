"""A high-priority gang preempts a low-priority gang as a whole on the real control plane: the
victims are evicted through the Eviction API, Events name preemptor and victims, and the
preemptor's members carry ``status.nominatedNodeName`` before they bind."""

from __future__ import annotations

import asyncio
import contextlib

from common.kube import PODS, KubeError
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod

PRIORITY_CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: {name}
value: {value}
"""


async def test_a_high_priority_gang_preempts_a_whole_low_priority_gang(
    cluster: GangCluster,
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=4)
    low, high = f"low-{cluster.run}", f"high-{cluster.run}"
    await cluster.create(PRIORITY_CLASSES.format(name=low, value=10))
    await cluster.create(PRIORITY_CLASSES.format(name=high, value=1000))
    nominated: dict[str, str] = {}

    async def watch_nominations() -> None:
        with contextlib.suppress(KubeError):
            async for _, pod in cluster.kube.watch(PODS, namespace=cluster.namespace):
                node = (pod.get("status") or {}).get("nominatedNodeName")
                if node:
                    nominated[pod["metadata"]["name"]] = node

    watcher = asyncio.create_task(watch_nominations())
    async with Controllers(cluster), cluster.gang_coordinator():
        for k in range(3):
            await cluster.create(gang_pod(f"batch-{k}", "batch", 3, priority_class=low))
        await cluster.all_bound("topos.io/gang=batch", 3)
        for k in range(2):
            await cluster.create(gang_pod(f"urgent-{k}", "urgent", 2, priority_class=high))
        placed = await cluster.all_bound("topos.io/gang=urgent", 2)
        # The whole low gang went (never half of it), though 1 node was free already.
        assert await cluster.placement("topos.io/gang=batch") == {}
        assert set(placed.values()) <= set(nodes)
        event = await cluster.event("Preempted", name="batch-0")
        assert f"gang:{cluster.namespace}/urgent" in event["message"]
        preempting = await cluster.event("Preempting", name="urgent-0")
        assert (
            f"preempts gang:{cluster.namespace}/batch (priority 10, 3 pods)"
            in (preempting["message"])
        )
        # Nominated while the victims were leaving; bound there afterwards.
        assert nominated == placed
    watcher.cancel()


async def test_an_equal_priority_gang_waits_instead_of_preempting(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        for k in range(2):
            await cluster.create(gang_pod(f"first-{k}", "first", 2))
        await cluster.all_bound("topos.io/gang=first", 2)
        for k in range(2):
            await cluster.create(gang_pod(f"second-{k}", "second", 2))
        message = await cluster.condition("second-0", "nodes are available")
        assert "waiting for pod group second: 0/2 members placed" in message
        assert len(await cluster.all_bound("topos.io/gang=first", 2)) == 2
        assert not await cluster.events(reason="Preempted")
