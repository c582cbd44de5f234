"""KubeRay ray-operator v1.5.0, built from its module, on the real control plane: a RayCluster
written as KubeRay's sample (config/samples/ray-cluster.sample.yaml) with a second worker group
asking for a GPU, ``schedulerName: topos`` on each template. KubeRay makes the head and every
worker pod itself, and Topos binds them all."""

from __future__ import annotations

from collections import Counter

from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import assignment
from tests.support.workload_controllers import RAY_CLUSTERS
from tests.support.workload_examples import ray_cluster


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
