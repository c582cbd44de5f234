"""Kueue v0.17.0 in front, Topos behind, on the real control plane with the real Kueue (built from
its module, its webhooks and CRD conversion on loopback): Kueue suspends and admits by quota,
Topos places the admitted pods. Two ClusterQueues in one cohort lend to each other; a
higher-priority workload in the other queue reclaims the lent quota (Kueue evicts the borrower,
its pods go, and the room Topos held is the new pods' at once); a Job deleted and applied again
under the same name is admitted and placed again. The kubelet's part (a pod being deleted goes)
is played by ``tests.support.gang_cluster.Controllers``."""

from __future__ import annotations

from typing import Any

from devcluster.kube_wait import wait_for, wait_for_object
from tests.support.gang_cluster import Controllers, GangCluster
from tests.support.gpu_cluster import assignment
from tests.support.kueue import (
    CLUSTER_QUEUES,
    JOBS,
    WORKLOADS,
    condition,
    is_true,
    job,
    jobset,
    queues,
    workload_of,
)
from tests.support.workload_controllers import JOBSETS


def suspended(obj: dict[str, Any]) -> bool:
    return bool(obj["spec"].get("suspend"))


async def test_kueue_admits_a_job_and_a_jobset_and_topos_places_their_pods(
    kueue_controller: object, cluster: GangCluster
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with queues(cluster.kube, cluster.namespace) as made, cluster.gang_coordinator():
        created = await cluster.kube.create(
            JOBS, job("train", "team-a", pods=2, gpus=4), namespace=cluster.namespace
        )
        # Kueue's Job webhook (on loopback) created it suspended; its Workload is admitted
        # against team-a's quota, and Kueue starts the Job.
        assert suspended(created)
        workload = await workload_of(
            cluster.kube, cluster.namespace, created["metadata"]["uid"], admitted=True
        )
        assert workload["status"]["admission"]["clusterQueue"] == made.cluster_queues["team-a"]
        placed = await cluster.all_bound("job-name=train", 2)
        sets = await cluster.kube.create(
            JOBSETS,
            jobset("pair", "team-b", replicas=2, pods=1, gpus=4),
            namespace=cluster.namespace,
        )
        await workload_of(cluster.kube, cluster.namespace, sets["metadata"]["uid"], admitted=True)
        placed |= await cluster.all_bound("jobset.sigs.k8s.io/jobset-name=pair", 2)
    assert set(placed.values()) <= set(nodes)
    for pod in await cluster.pods():
        _, gpus, _ = assignment(pod)
        # Topos chose the GPUs (its annotation), Kueue only the quota.
        assert len(gpus) == 4, pod["metadata"]["name"]
        assert pod["spec"]["schedulerName"] == "topos"
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"]
    # The four pods hold all 16 GPUs of the two nodes, none twice.
    held = [(assignment(p)[0], g) for p in await cluster.pods() for g in assignment(p)[1]]
    assert len(set(held)) == 16


async def test_a_higher_priority_workload_reclaims_lent_quota_and_gets_the_room_at_once(
    kueue_controller: object, cluster: GangCluster
) -> None:
    """team-a borrows team-b's 8 GPUs (2 pods × 8 on both nodes); team-b's high-priority Job
    reclaims them: Kueue evicts team-a's workload (its Job suspended, its pods deleted), the
    room Topos held for them is free once they are gone, and team-b's pod binds there; team-a's
    workload waits for quota (its Job suspended, no pods)."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with (
        queues(cluster.kube, cluster.namespace) as made,
        cluster.gang_coordinator(),
        Controllers(cluster),
    ):
        borrower = await cluster.kube.create(
            JOBS,
            job("borrower", "team-a", pods=2, gpus=8, priority_class=made.low),
            namespace=cluster.namespace,
        )
        before = await cluster.all_bound("job-name=borrower", 2)
        assert len(set(before.values())) == 2  # both nodes, all 16 GPUs
        reclaimer = await cluster.kube.create(
            JOBS,
            job("reclaimer", "team-b", pods=1, gpus=8, priority_class=made.high),
            namespace=cluster.namespace,
        )
        evicted = await wait_for_object(
            cluster.kube,
            WORKLOADS,
            (await workload_of(cluster.kube, cluster.namespace, borrower["metadata"]["uid"]))[
                "metadata"
            ]["name"],
            lambda w: is_true(w, "Evicted"),
            namespace=cluster.namespace,
            what="the borrower's Workload evicted",
        )
        reason = condition(evicted, "Evicted")
        assert reason is not None
        assert reason["reason"] == "Preempted", reason
        after = await cluster.all_bound("job-name=reclaimer", 1)
        (node,) = after.values()
        assert node in before.values()  # where the borrower's pod was
        await cluster.none_left("job-name=borrower")
        await workload_of(
            cluster.kube, cluster.namespace, reclaimer["metadata"]["uid"], admitted=True
        )
        borrower_now = await cluster.kube.get(JOBS, "borrower", namespace=cluster.namespace)
        assert suspended(borrower_now)  # waiting for quota, not for Topos


async def test_a_job_deleted_and_applied_again_under_its_name_is_admitted_and_placed_again(
    kueue_controller: object, cluster: GangCluster
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    async with (
        queues(cluster.kube, cluster.namespace) as made,
        cluster.gang_coordinator(),
        Controllers(cluster),
    ):
        first = await cluster.kube.create(
            JOBS, job("again", "team-a", pods=1, gpus=8), namespace=cluster.namespace
        )
        old = await cluster.all_bound("job-name=again", 1)
        await wait_for_object(
            cluster.kube,
            CLUSTER_QUEUES,
            made.cluster_queues["team-a"],
            lambda cq: (cq.get("status") or {}).get("reservingWorkloads") == 1,
            what="team-a's ClusterQueue counting the first run",
        )
        await cluster.kube.delete(
            JOBS, "again", namespace=cluster.namespace, propagation_policy="Foreground"
        )
        await cluster.none_left("job-name=again")
        # kubectl delete waits until the Job is gone (its pods first, Foreground); so does this.
        await wait_for(
            cluster.kube,
            JOBS,
            lambda jobs: True if not jobs else None,
            namespace=cluster.namespace,
            name="again",
            what="the Job gone",
        )
        # And until Kueue saw its Workload go (its ClusterQueue reserves for none): Kueue v0.17.0
        # finds Workloads by their owner's name, and a Job applied again while its cache still
        # holds the old Workload is started under the old one, stopped, and left suspended with
        # a Workload that cannot start (docs/kueue.md, "Delete and apply again").
        await wait_for_object(
            cluster.kube,
            CLUSTER_QUEUES,
            made.cluster_queues["team-a"],
            lambda cq: (cq.get("status") or {}).get("reservingWorkloads") == 0,
            what="team-a's ClusterQueue reserving nothing",
        )
        second = await cluster.kube.create(
            JOBS, job("again", "team-a", pods=1, gpus=8), namespace=cluster.namespace
        )
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        await workload_of(cluster.kube, cluster.namespace, second["metadata"]["uid"], admitted=True)
        new = await cluster.all_bound("job-name=again", 1)
    # The whole node again: the first run's 8 GPUs were free once its pod was gone.
    assert list(new.values()) == list(old.values())
    (pod,) = await cluster.pods("job-name=again")
    assert len(assignment(pod)[1]) == 8
