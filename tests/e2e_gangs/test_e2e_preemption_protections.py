"""Whole-gang preemption and its protections on the real control plane: a gang victim is evicted
whole (every pod gets its eviction and a Preempted Event saying why); a high-priority pod waits
out its preemption delay, then preempts; a pod under its minimum runtime (its startTime written by
the test, as a kubelet would) is not preempted and the pending pod's message says so; a
PodDisruptionBudget that forbids every eviction that would help is named in that message."""

from __future__ import annotations

import datetime
from typing import Any

from common.kube import PODS
from coordinator.adapters.kube.objects import PDBS
from coordinator.core.preemption.protections import DurationRule, Protections
from coordinator.engine.gangs.service import GangSettings
from devcluster import pods
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod

PRIORITY_CLASS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: {name}
value: {value}
"""


def worker(
    name: str,
    *,
    priority_class: str,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return pods.pod(
        name,
        namespace=None,
        gpus=8,
        cpu="8",
        memory="8Gi",
        priority_class=priority_class,
        annotations=annotations,
        labels=labels,
    )


async def classes(cluster: GangCluster) -> tuple[str, str]:
    low, high = f"low-{cluster.run}", f"high-{cluster.run}"
    await cluster.create(PRIORITY_CLASS.format(name=low, value=10))
    await cluster.create(PRIORITY_CLASS.format(name=high, value=1000))
    return low, high


async def test_a_gang_victim_is_evicted_whole(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    low, high = await classes(cluster)
    async with Controllers(cluster), cluster.gang_coordinator():
        for k in range(3):
            await cluster.create(gang_pod(f"batch-{k}", "batch", 3, priority_class=low))
        await cluster.all_bound("topos.io/gang=batch", 3)
        # One node is all it needs; the gang holding all three goes whole.
        await cluster.create(worker("urgent", priority_class=high))
        await cluster.bound("urgent")
        assert await cluster.placement("topos.io/gang=batch") == {}
        for k in range(3):
            event = await cluster.event("Preempted", name=f"batch-{k}")
            assert f"Preempted by {cluster.namespace}/urgent (priority 1000)" in event["message"]
            assert (
                f"its gang {cluster.namespace}/batch is evicted whole (3 pods)"
                in (event["message"])
            )
        preempting = await cluster.event("Preempting", name="urgent")
        assert f"gang:{cluster.namespace}/batch (priority 10, 3 pods)" in preempting["message"]


async def test_a_pending_pod_waits_out_its_preemption_delay_then_preempts(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    low, high = await classes(cluster)
    settings = GangSettings(
        backoff_s=2.0, protections=Protections(preemption_delay=DurationRule(default_s=3.0))
    )
    async with Controllers(cluster), cluster.gang_coordinator(gang_settings=settings):
        await cluster.create(worker("filler", priority_class=low))
        await cluster.bound("filler")
        await cluster.create(worker("urgent", priority_class=high))
        message = await cluster.condition("urgent", "preemption waits")
        assert "(preemption delay: room may come without evicting anyone)" in message
        assert not await cluster.events(reason="Preempted")
        await cluster.bound("urgent")  # the delay over, it preempts and binds
        event = await cluster.event("Preempted", name="filler")
        assert f"Preempted by {cluster.namespace}/urgent (priority 1000)" in event["message"]


async def test_a_pod_under_its_minimum_runtime_is_not_preempted(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    low, high = await classes(cluster)
    async with cluster.gang_coordinator():
        await cluster.create(
            worker("filler", priority_class=low, annotations={"topos.io/min-runtime": "1h"})
        )
        await cluster.bound("filler")
        started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await cluster.kube.patch(
            PODS,
            "filler",
            {"status": {"phase": "Running", "startTime": started}},
            namespace=cluster.namespace,
            subresource="status",
        )
        await cluster.create(worker("urgent", priority_class=high))
        message = await cluster.condition("urgent", "minimum runtime")
        assert "only evicting pods under their minimum runtime would make room" in message
        assert f"{cluster.namespace}/filler has run" in message
        assert "of its minimum runtime 1h" in message
        assert not await cluster.events(reason="Preempted")
        assert (await cluster.pod("filler"))["spec"]["nodeName"]


async def test_a_budget_that_forbids_every_eviction_is_named(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    low, high = await classes(cluster)
    await cluster.kube.create(
        PDBS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
        namespace=cluster.namespace,
    )
    async with Controllers(cluster), cluster.gang_coordinator():
        await cluster.create(worker("filler", priority_class=low, labels={"app": "web"}))
        await cluster.bound("filler")
        await cluster.create(worker("urgent", priority_class=high))
        message = await cluster.condition("urgent", "PodDisruptionBudget")
        assert (
            f"only evictions the PodDisruptionBudget(s) {cluster.namespace}/web forbid would "
            "make room" in message
        )
        assert not await cluster.events(reason="Preempted")
