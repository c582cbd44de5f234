"""A pod asking for part of a GPU preempts on the real control plane (docs/sharing.md): every GPU
of the node is taken, and the one GPU two lower-priority halves share has room for a high-priority
half once the lower of them goes. That one is evicted (Events and the ``DisruptionTarget``
condition as for whole-GPU preemption), the other half stays, and the preemptor, nominated on the
node, lands on that GPU. No kubelet runs here, so the test removes the evicted pod."""

from __future__ import annotations

from typing import Any

from common.kube import PODS
from tests.e2e_gangs.test_e2e_preemption_hold import PRIORITY_CLASS, nominated, terminating
from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import assignment
from tests.support.pods import gpu_pod, pod


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
