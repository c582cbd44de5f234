"""JobSet v0.10.1, built from its module, on the real control plane: JobSet's "paralleljobs" example
(site/static/examples/simple) with ``schedulerName: topos`` added. JobSet's webhooks are reached
on loopback (its defaulting gives the pods ``restartPolicy: OnFailure``; its validation refuses a
bad JobSet), its controller makes the Jobs, the Job controller the pods, and Topos binds them."""

from __future__ import annotations

import pytest

from common.kube import KubeError
from tests.support.gang_cluster import GangCluster
from tests.support.workload_controllers import JOBSETS
from tests.support.workload_examples import exclusive_placement, paralleljobs


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
