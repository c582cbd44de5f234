"""A pod asking for part of a GPU preempts on the real control plane (docs/sharing.md): every GPU
of the node is taken, and the one GPU two lower-priority halves share has room for a high-priority
half once the lower of them goes. That one is evicted (Events and the ``DisruptionTarget``
condition as for whole-GPU preemption), the other half stays, and the preemptor, nominated on the
node, lands on that GPU; while its victims terminate, the room they free on that GPU is held
for it. No kubelet runs here, so the test removes the evicted pods."""

from __future__ import annotations

from typing import Any

from common.kube import PODS
from devcluster.pods import gpu_pod, pod
from tests.e2e_gangs.test_e2e_preemption_hold import PRIORITY_CLASS, nominated, terminating
from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import assignment


def half(name: str, priority_class: str) -> dict[str, Any]:
    return pod(
        name,
        namespace=None,
        priority_class=priority_class,
        annotations={"topos.io/gpu-fraction": "0.5"},
    )


async def test_a_high_priority_half_evicts_the_lowest_share_holder_and_takes_its_room(
    cluster: GangCluster,
) -> None:
    (node,) = await cluster.fabric(
        spines=1, leaves_per_spine=1, nodes_per_leaf=1, profile="dgx-h100"
    )
    low, mid, high = (f"{p}-{cluster.run}" for p in ("low", "mid", "high"))
    for name, value in ((low, 10), (mid, 500), (high, 1000)):
        await cluster.create(PRIORITY_CLASS.format(name=name, value=value))
    async with cluster.gang_coordinator():
        await cluster.create(gpu_pod("keep", 7, priority_class=high))
        await cluster.bound("keep")
        await cluster.create(half("low", low))
        shared = assignment(await cluster.bound("low"))[1]
        await cluster.create(half("mid", mid))
        assert assignment(await cluster.bound("mid"))[1] == shared  # the node is full now

        await cluster.create(half("urgent", high))
        await nominated(cluster, "urgent", node)
        preempted = await cluster.event("Preempted", name="low")
        assert f"Preempted by {cluster.namespace}/urgent (priority 1000)" in preempted["message"]
        preempting = await cluster.event("Preempting", name="urgent")
        assert f"preempts {cluster.namespace}/low (priority 10, 1 pod)" in preempting["message"]
        await terminating(cluster, "low")
        conditions = {c["type"]: c for c in (await cluster.pod("low"))["status"]["conditions"]}
        assert conditions["DisruptionTarget"]["status"] == "True"

        await cluster.kube.delete(PODS, "low", namespace=cluster.namespace, grace_period_seconds=0)
        urgent = await cluster.bound("urgent")
        assert assignment(urgent)[:2] == (node, shared)
        assert urgent["metadata"]["annotations"]["topos.io/gpu-share"].startswith("fraction=0.5")
        # The other half and the whole-GPU pod stay: one victim made the room.
        assert not (await cluster.pod("mid"))["metadata"].get("deletionTimestamp")
        assert len(await cluster.events(reason="Preempted")) == 1


async def test_a_nominated_half_holds_the_quarter_its_first_victim_left(
    cluster: GangCluster,
) -> None:
    """Two low quarters share a GPU with a high half; ``urgent`` (a half) evicts both. Once the
    first is gone and the second still terminates, a later low quarter does not take the room
    the first left: the nominated half holds it, on that GPU (docs/sharing.md)."""
    (node,) = await cluster.fabric(
        spines=1, leaves_per_spine=1, nodes_per_leaf=1, profile="dgx-h100"
    )
    low, high = f"low-{cluster.run}", f"high-{cluster.run}"
    await cluster.create(PRIORITY_CLASS.format(name=low, value=10))
    await cluster.create(PRIORITY_CLASS.format(name=high, value=1000))
    quarters = ("q-0", "q-1")
    async with cluster.gang_coordinator():
        await cluster.create(gpu_pod("keep", 7, priority_class=high))
        await cluster.bound("keep")
        await cluster.create(half("half", high))
        shared = assignment(await cluster.bound("half"))[1]
        for name in quarters:
            await cluster.create(quarter(name, low))
            assert assignment(await cluster.bound(name))[1] == shared

        await cluster.create(half("urgent", high))
        await nominated(cluster, "urgent", node)
        for name in quarters:
            await terminating(cluster, name)
        await cluster.kube.delete(PODS, "q-0", namespace=cluster.namespace, grace_period_seconds=0)
        await cluster.create(quarter("late", low))
        assert "no GPU with room for the share" in await cluster.unschedulable("late")
        await cluster.kube.delete(PODS, "q-1", namespace=cluster.namespace, grace_period_seconds=0)
        urgent = await cluster.bound("urgent")
        assert assignment(urgent)[:2] == (node, shared)
        assert not (await cluster.pod("late"))["spec"].get("nodeName")
        # The two quarters made the room; nobody else was evicted for it.
        assert len(await cluster.events(reason="Preempted")) == 2


def quarter(name: str, priority_class: str) -> dict[str, Any]:
    return pod(
        name,
        namespace=None,
        priority_class=priority_class,
        annotations={"topos.io/gpu-fraction": "0.25"},
    )
