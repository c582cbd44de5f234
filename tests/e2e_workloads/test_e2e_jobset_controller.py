"""JobSet v0.10.1, built from its module, on the real control plane: JobSet's "paralleljobs" example
(site/static/examples/simple) with ``schedulerName: topos`` added. JobSet's webhooks are reached
on loopback (its defaulting gives the pods ``restartPolicy: OnFailure``; its validation refuses a
bad JobSet), its controller makes the Jobs, the Job controller the pods, and Topos binds them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from common.kube import NODES, KubeError
from devcluster.kube_wait import wait_for, wait_for_pods
from tests.support.gang_cluster import LEAF, SPINE, Controllers, GangCluster
from tests.support.workload_controllers import JOBSETS
from tests.support.workload_examples import (
    exclusive_placement,
    max_restarts,
    paralleljobs,
    pytorch,
)
from tests.support.workload_runs import GANG, all_waiting, fail, hold_gpus, release, runs

RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


async def test_jobset_example_pods_made_by_jobset_and_bound_by_topos(
    jobset_controller: object, cluster: GangCluster
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        await cluster.kube.create(JOBSETS, paralleljobs(), namespace=cluster.namespace)
        placed = await cluster.all_bound("jobset.sigs.k8s.io/jobset-name=paralleljobs", 5)
    assert set(placed.values()) <= set(nodes)
    pods = await cluster.pods("jobset.sigs.k8s.io/jobset-name=paralleljobs")
    by_job = sorted(p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] for p in pods)
    assert by_job == ["driver"] + ["workers"] * 4
    # JobSet's defaulting webhook (called on 127.0.0.1) set what the example left out.
    assert {p["spec"]["restartPolicy"] for p in pods} == {"OnFailure"}
    assert {p["spec"]["schedulerName"] for p in pods} == {"topos"}


async def test_jobset_validating_webhook_refuses_a_bad_jobset(
    jobset_controller: object, cluster: GangCluster
) -> None:
    bad = paralleljobs()
    bad["metadata"]["name"] = "bad-success-policy"
    bad["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["nope"]}
    with pytest.raises(KubeError) as refused:
        await cluster.kube.create(JOBSETS, bad, namespace=cluster.namespace)
    # Only JobSet's validating webhook knows this rule: the API server called it on loopback.
    message = str(refused.value)
    assert "vjobset.kb.io" in message, message
    assert "invalid replicatedJob name 'nope'" in message, message
    listed = await cluster.kube.list(JOBSETS, namespace=cluster.namespace)
    assert listed["items"] == []


async def test_jobset_pod_webhooks_pin_each_jobs_followers_to_its_leaders_leaf(
    jobset_controller: object, cluster: GangCluster
) -> None:
    """Exclusive placement runs through JobSet's pod webhooks: the pod of completion index 0 of
    each Job gets the affinities, the others are refused until it is bound and then get a
    nodeSelector for its leaf (the webhooks on loopback, with the Topos binding in between)."""
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=1)
    selector = "jobset.sigs.k8s.io/jobset-name=exclusive-placement"
    async with cluster.gang_coordinator():
        await cluster.kube.create(JOBSETS, exclusive_placement(), namespace=cluster.namespace)
        placed = await cluster.all_bound(selector, 4)
    pods = await cluster.pods(selector)
    leaf_of_job: dict[str, str] = {}
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        if annotations["batch.kubernetes.io/job-completion-index"] == "0":
            assert pod["spec"]["affinity"]["podAntiAffinity"], pod["metadata"]["name"]
            job = pod["metadata"]["labels"]["job-name"]
            leaf_of_job[job] = cluster.leaf_of[placed[pod["metadata"]["name"]]]
    assert sorted(leaf_of_job.values()) == ["leaf-1", "leaf-2"]  # one Job per leaf
    for pod in pods:
        if pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] != "0":
            job = pod["metadata"]["labels"]["job-name"]
            assert pod["spec"]["nodeSelector"] == {"topos.io/leaf": leaf_of_job[job]}
            assert cluster.leaf_of[placed[pod["metadata"]["name"]]] == leaf_of_job[job]


async def test_jobset_exclusive_placement_waits_whole_for_a_second_leaf_then_one_job_per_leaf(
    jobset_controller: object, cluster: GangCluster
) -> None:
    """JobSet's exclusive placement wants one Job per leaf: with one leaf, no pod binds (not one
    Job's leader on its own); once a second leaf appears every pod binds, a Job per leaf."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    selector = "jobset.sigs.k8s.io/jobset-name=exclusive-placement"
    async with cluster.gang_coordinator() as coordinator:
        await cluster.kube.create(JOBSETS, exclusive_placement(), namespace=cluster.namespace)
        # JobSet's webhook admits the followers only once a leader is scheduled: the two leaders.
        leaders = await all_waiting(cluster, selector, 2)
        for leader in leaders:  # once both exist, Topos says why the pair cannot be placed
            await cluster.condition(leader["metadata"]["name"], "fits in no topos.io/leaf domain")
        assert not any(p["spec"].get("nodeName") for p in await cluster.pods(selector))
        await cluster.add_node("n2x0", "dgx-a100", labels_extra={LEAF: "leaf-2", SPINE: "spine-1"})
        cluster.hello(coordinator.inventory)
        placed = await cluster.all_bound(selector, 4)
    pods = await cluster.pods(selector)
    leaves: dict[str, set[str]] = {}
    for pod in pods:
        node = placed[pod["metadata"]["name"]]
        leaves.setdefault(pod["metadata"]["labels"]["job-name"], set()).add(
            (await cluster.kube.get(NODES, node))["metadata"]["labels"][LEAF]
        )
    assert sorted(leaves.values(), key=sorted) == [{"leaf-1"}, {"leaf-2"}], leaves


async def test_jobset_pytorch_example_is_all_or_nothing(
    jobset_controller: object, cluster: GangCluster
) -> None:
    """JobSet's PyTorch example, four workers of 8 GPUs, on four nodes of which one is taken: no
    worker binds; the node freed, all four bind at once."""
    nodes = await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)
    selector = "jobset.sigs.k8s.io/jobset-name=pytorch"
    async with cluster.gang_coordinator():
        await hold_gpus(cluster, "someone-else", 8)
        await cluster.kube.create(JOBSETS, pytorch(), namespace=cluster.namespace)
        waiting = await all_waiting(cluster, selector, 4)
        assert {p["metadata"]["labels"][GANG] for p in waiting} == {"pytorch"}
        await release(cluster, "someone-else")
        placed = await cluster.all_bound(selector, 4)
    assert sorted(placed.values()) == sorted(nodes)  # 8 GPUs each: one worker per node


async def test_jobset_deleted_and_applied_again_is_a_new_run_that_binds(
    jobset_controller: object, cluster: GangCluster
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    selector = "jobset.sigs.k8s.io/jobset-name=paralleljobs"
    async with cluster.gang_coordinator(), Controllers(cluster):
        await cluster.kube.create(JOBSETS, paralleljobs(), namespace=cluster.namespace)
        await cluster.all_bound(selector, 5)
        first = runs(await cluster.pods(selector))
        await cluster.kube.delete(
            JOBSETS, "paralleljobs", namespace=cluster.namespace, propagation_policy="Foreground"
        )
        await cluster.none_left(selector)
        await wait_for(
            cluster.kube,
            JOBSETS,
            lambda found: True if not found else None,
            namespace=cluster.namespace,
            name="paralleljobs",
            what="the JobSet gone",
        )
        await cluster.kube.create(JOBSETS, paralleljobs(), namespace=cluster.namespace)
        await cluster.all_bound(selector, 5)
        second = runs(await cluster.pods(selector))
    assert len(first) == len(second) == 1
    assert first != second  # the new JobSet (a new UID) is a new run of the gang


async def test_a_failed_pod_makes_jobset_recreate_its_jobs_as_a_new_run(
    jobset_controller: object, cluster: GangCluster
) -> None:
    """JobSet's failure-policy example: a worker fails (backoffLimit 0 fails its Job), JobSet
    recreates every Job (restart attempt 1), and Topos places the new pods as a new run of the
    gang, all of them."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    selector = "jobset.sigs.k8s.io/jobset-name=max-restarts"
    async with cluster.gang_coordinator(), Controllers(cluster):
        await cluster.kube.create(JOBSETS, max_restarts(), namespace=cluster.namespace)
        placed = await cluster.all_bound(selector, 3)
        old = await cluster.pods(selector)
        assert {p["metadata"]["labels"][GANG] for p in old} == {"max-restarts"}
        worker = next(n for n in placed if "-workers-" in n)
        await fail(cluster, worker)

        def restarted(listed: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
            live = [p for p in listed if not p["metadata"].get("deletionTimestamp")]
            attempt = {p["metadata"]["labels"].get(RESTART_ATTEMPT) for p in live}
            if len(live) == 3 and attempt == {"1"} and all(p["spec"].get("nodeName") for p in live):
                return live
            return None

        new = await wait_for_pods(
            cluster.kube,
            cluster.namespace,
            restarted,
            label_selector=selector,
            what="the 3 pods of restart attempt 1 bound",
        )
    assert len(runs(new)) == 1
    assert runs(new).isdisjoint(runs(old))
