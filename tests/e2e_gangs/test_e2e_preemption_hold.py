"""The room a preemption frees is held for the preemptor while its victims terminate, on the real
control plane. No kubelet runs here, so an evicted pod stays ``Terminating`` until the test
removes it (the kubelet's part): meanwhile a lower-priority pod created later does not take the
room, and once the victim is gone the preemptor binds on its nominated node. The preemptor's
nominated node and its ``PodScheduled=False`` condition saying why arrive in one write, as
kube-scheduler's."""

from __future__ import annotations

from typing import Any

from common.kube import PODS
from devcluster.kube_wait import wait_for_object
from devcluster.pods import gpu_pod
from tests.support.gang_cluster import GangCluster

PRIORITY_CLASS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: {name}
value: {value}
"""


async def nominated(cluster: GangCluster, name: str, node: str) -> dict[str, Any]:
    """The pod as first seen (by watch) with ``status.nominatedNodeName`` ``node``."""
    return await wait_for_object(
        cluster.kube,
        PODS,
        name,
        lambda pod: (pod.get("status") or {}).get("nominatedNodeName") == node,
        namespace=cluster.namespace,
        what=f"{name} nominated on {node}",
    )


async def terminating(cluster: GangCluster, name: str) -> None:
    """Evicted: ``deletionTimestamp`` set, and (no kubelet here) still there."""
    await wait_for_object(
        cluster.kube,
        PODS,
        name,
        lambda pod: bool(pod["metadata"].get("deletionTimestamp")),
        namespace=cluster.namespace,
        what=f"{name} terminating",
    )


async def test_a_lower_priority_pod_does_not_take_the_room_the_victims_are_leaving(
    cluster: GangCluster,
) -> None:
    (node,) = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)  # 8 GPUs
    low, high = f"low-{cluster.run}", f"high-{cluster.run}"
    await cluster.create(PRIORITY_CLASS.format(name=low, value=10))
    await cluster.create(PRIORITY_CLASS.format(name=high, value=1000))
    async with cluster.gang_coordinator():
        await cluster.create(gpu_pod("filler", 6, priority_class=low))
        assert (await cluster.bound("filler"))["spec"]["nodeName"] == node
        await cluster.create(gpu_pod("urgent", 8, priority_class=high))
        # The first version of the pod that names the node says why too: one pods/status write.
        first = await nominated(cluster, "urgent", node)
        [scheduled] = [
            c for c in first["status"].get("conditions") or () if c["type"] == "PodScheduled"
        ]
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        assert (
            f"preempting 1 lower-priority pod: {cluster.namespace}/urgent preempts"
            in (scheduled["message"])
        )
        await terminating(cluster, "filler")
        # Two GPUs are free on the node, but they are the preemptor's.
        await cluster.create(gpu_pod("late", 2, priority_class=low))
        message = await cluster.unschedulable("late")
        assert "Insufficient nvidia.com/gpu" in message
        # The kubelet's part: the victim's containers stopped, the pod goes.
        await cluster.kube.delete(
            PODS, "filler", namespace=cluster.namespace, grace_period_seconds=0
        )
        assert (await cluster.bound("urgent"))["spec"]["nodeName"] == node
        assert not (await cluster.pod("late"))["spec"].get("nodeName")


async def test_the_hold_survives_a_coordinator_restart(cluster: GangCluster) -> None:
    (node,) = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    low, high = f"low-{cluster.run}", f"high-{cluster.run}"
    await cluster.create(PRIORITY_CLASS.format(name=low, value=10))
    await cluster.create(PRIORITY_CLASS.format(name=high, value=1000))
    async with cluster.gang_coordinator():
        await cluster.create(gpu_pod("filler", 6, priority_class=low))
        await cluster.bound("filler")
        await cluster.create(gpu_pod("urgent", 8, priority_class=high))
        await nominated(cluster, "urgent", node)
        await terminating(cluster, "filler")
    # A new coordinator knows nothing but what the API server says: urgent is nominated there.
    async with cluster.gang_coordinator():
        await cluster.create(gpu_pod("late", 2, priority_class=low))
        assert "Insufficient nvidia.com/gpu" in await cluster.unschedulable("late")
        await cluster.kube.delete(
            PODS, "filler", namespace=cluster.namespace, grace_period_seconds=0
        )
        assert (await cluster.bound("urgent"))["spec"]["nodeName"] == node
        assert not (await cluster.pod("late"))["spec"].get("nodeName")
        # It waited for the victim it had already evicted instead of evicting again.
        assert len(await cluster.events(reason="Preempted")) == 1


async def test_a_higher_priority_preemptor_clears_a_lower_nomination(cluster: GangCluster) -> None:
    (node,) = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    low, mid, high = (f"{p}-{cluster.run}" for p in ("low", "mid", "high"))
    for name, value in ((low, 10), (mid, 500), (high, 1000)):
        await cluster.create(PRIORITY_CLASS.format(name=name, value=value))
    async with cluster.gang_coordinator():
        for k in range(2):
            await cluster.create(gpu_pod(f"filler-{k}", 4, priority_class=low))
            await cluster.bound(f"filler-{k}")
        await cluster.create(gpu_pod("middle", 4, priority_class=mid))
        await nominated(cluster, "middle", node)
        await cluster.create(gpu_pod("urgent", 4, priority_class=high))
        await nominated(cluster, "urgent", node)
        await wait_for_object(
            cluster.kube,
            PODS,
            "middle",
            lambda pod: "nominatedNodeName" not in (pod.get("status") or {}),
            namespace=cluster.namespace,
            what="middle's nomination cleared",
        )
