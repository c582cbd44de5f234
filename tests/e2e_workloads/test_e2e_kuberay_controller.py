"""KubeRay ray-operator v1.5.0, built from its module, on the real control plane: a RayCluster
written as KubeRay's sample (config/samples/ray-cluster.sample.yaml) with a second worker group
asking for a GPU, ``schedulerName: topos`` on each template. KubeRay makes the head and every
worker pod itself, and Topos binds them all."""

from __future__ import annotations

from collections import Counter

from common.kube import PODS
from devcluster.kube_wait import wait_for
from tests.support.gang_cluster import Controllers, GangCluster
from tests.support.gpu_cluster import assignment
from tests.support.workload_controllers import RAY_CLUSTERS
from tests.support.workload_examples import ray_cluster
from tests.support.workload_runs import GANG, all_waiting, hold_gpus, release, runs

SELECTOR = "ray.io/cluster=raycluster-kuberay"
RAY_GROUP = "ray.io/group"


async def test_raycluster_two_worker_groups_pods_made_by_kuberay_and_bound_by_topos(
    kuberay_controller: object, cluster: GangCluster
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        await cluster.kube.create(RAY_CLUSTERS, ray_cluster(), namespace=cluster.namespace)
        placed = await cluster.all_bound("ray.io/cluster=raycluster-kuberay", 4)
    assert set(placed.values()) <= set(nodes)
    pods = await cluster.pods("ray.io/cluster=raycluster-kuberay")
    groups = Counter(p["metadata"]["labels"]["ray.io/group"] for p in pods)
    assert groups == {"headgroup": 1, "workergroup": 1, "gpu-group": 2}
    kinds = Counter(p["metadata"]["labels"]["ray.io/node-type"] for p in pods)
    assert kinds == {"head": 1, "worker": 3}
    for pod in pods:
        _, gpus, _ = assignment(pod)
        expected = 1 if pod["metadata"]["labels"]["ray.io/group"] == "gpu-group" else 0
        assert len(gpus) == expected, (pod["metadata"]["name"], gpus)


async def test_raycluster_head_and_minimum_workers_are_all_or_nothing(
    kuberay_controller: object, cluster: GangCluster
) -> None:
    """The head and both groups' minReplicas are one gang: with one GPU free for the two GPU
    workers, not even the head binds; the GPUs freed, all four bind."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    async with cluster.gang_coordinator():
        await hold_gpus(cluster, "someone-else", 7)
        await cluster.kube.create(RAY_CLUSTERS, ray_cluster(), namespace=cluster.namespace)
        waiting = await all_waiting(cluster, SELECTOR, 4)
        assert {p["metadata"]["labels"][GANG] for p in waiting} == {"raycluster-kuberay"}
        assert {p["metadata"]["labels"]["topos.io/gang-min"] for p in waiting} == {"4"}
        await release(cluster, "someone-else")
        await cluster.all_bound(SELECTOR, 4)


async def test_raycluster_deleted_and_applied_again_is_a_new_run_and_a_lost_worker_comes_back(
    kuberay_controller: object, cluster: GangCluster
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator(), Controllers(cluster):
        await cluster.kube.create(RAY_CLUSTERS, ray_cluster(), namespace=cluster.namespace)
        placed = await cluster.all_bound(SELECTOR, 4)
        first = runs(await cluster.pods(SELECTOR))
        # A GPU worker killed: KubeRay makes a new one, which joins the running gang.
        lost = next(
            p
            for p in await cluster.pods(SELECTOR)
            if p["metadata"]["labels"][RAY_GROUP] == "gpu-group"
        )
        await cluster.kube.delete(PODS, lost["metadata"]["name"], namespace=cluster.namespace)
        await wait_for(
            cluster.kube,
            PODS,
            lambda found: True if not found else None,
            namespace=cluster.namespace,
            name=lost["metadata"]["name"],
            what="the killed worker gone",
        )
        again = await cluster.all_bound(SELECTOR, 4)
        assert runs(await cluster.pods(SELECTOR)) == first
        assert len(set(again) - set(placed)) == 1  # the new worker, under a new name
        await cluster.kube.delete(
            RAY_CLUSTERS,
            "raycluster-kuberay",
            namespace=cluster.namespace,
            propagation_policy="Foreground",
        )
        await cluster.none_left(SELECTOR)
        await wait_for(
            cluster.kube,
            RAY_CLUSTERS,
            lambda found: True if not found else None,
            namespace=cluster.namespace,
            name="raycluster-kuberay",
            what="the RayCluster gone",
        )
        await cluster.kube.create(RAY_CLUSTERS, ray_cluster(), namespace=cluster.namespace)
        await cluster.all_bound(SELECTOR, 4)
        second = runs(await cluster.pods(SELECTOR))
    assert len(first) == len(second) == 1
    assert first != second
