"""A gang's members are not told why they wait while their siblings are still being created, on
the real control plane with kube-controller-manager's Job controller making the pods
(docs/gangs.md, "What happens to a gang member"): a Job whose pods are fewer than its gang's
minimum is told once no new member has joined for 2 s; a Job whose pods all come binds with no
``FailedScheduling`` Event at all.

Fabric: one leaf of two DGX A100 nodes (16 GPUs); members ask for 2 GPUs."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from common.kube import EVENTS
from tests.support.gang_cluster import GangCluster
from tests.support.polling import eventually
from tests.support.workloads import apply, gpu_job, pods_of

GRACE_S = 2.0  # GangSettings.arrival_quiet_s


def job(name: str, parallelism: int, minimum: int) -> str:
    labels = {"topos.io/gang": name, "topos.io/gang-min": str(minimum)}
    return gpu_job(name, {}, 2, parallelism=parallelism, labels=labels)


async def failed_scheduling(cluster: GangCluster) -> dict[str, list[dict[str, Any]]]:
    """The namespace's ``FailedScheduling`` Events by pod."""
    events = (await cluster.kube.list(EVENTS, namespace=cluster.namespace))["items"]
    out: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if event["reason"] == "FailedScheduling":
            out.setdefault(event["involvedObject"]["name"], []).append(event)
    return out


def created(pod: dict[str, Any]) -> float:
    stamp = pod["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


async def test_a_job_short_of_its_gang_is_told_after_the_grace_and_once(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator() as coord:
        await apply(cluster, job("short", 2, 3))
        pods = await pods_of(cluster, "job-name=short", 2)
        last = max(created(p) for p in pods)  # to the second: at or before the real create
        names = sorted(p["metadata"]["name"] for p in pods)
        message = await cluster.condition(names[-1], "waiting for all 3 pods to exist")
        seen = time.time()
        assert (
            message
            == "waiting for pod group short: 0/3 members placed (waiting for all 3 pods to exist)"
        )
        # Never before the grace: no member joined in the 2 s before it was told.
        assert seen - last >= GRACE_S, f"told {seen - last:.2f} s after the last create"
        await coord.runtime.scheduler.drain()
        failed = await failed_scheduling(cluster)
        assert sorted(failed) == names
        assert all([e["message"] for e in failed[n]] == [message] for n in names)
        assert all(
            e["type"] == "Warning" and e.get("count", 1) == 1 for n in names for e in failed[n]
        )
        assert set((await cluster.placement("job-name=short")).values()) == {None}


async def test_a_job_whose_pods_all_come_binds_without_a_failed_scheduling_event(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator() as coord:
        await apply(cluster, job("full", 8, 8))  # the Job controller makes 8 pods, in batches
        placed = await cluster.all_bound("job-name=full", 8)
        assert len(placed) == 8
        manager = coord.gangs.step.manager
        await eventually(  # the binds' answers reach the coordinator after the API server
            lambda: (
                [(s.name, s.phase, s.bound) for s in manager.statuses()] == [("full", "Bound", 8)]
            ),
            what="the gang bound as the coordinator sees it",
        )
        await coord.runtime.scheduler.drain()  # every Event it had to write is written
        assert await failed_scheduling(cluster) == {}
