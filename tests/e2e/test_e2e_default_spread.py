"""End to end on the real control plane: a CPU-only Deployment's replicas, made by
kube-controller-manager and declaring no topologySpreadConstraints, are spread one per node by
Topos, as by kube-scheduler's default topology spreading (their ReplicaSet's selector,
watched)."""

from __future__ import annotations

from pathlib import Path

from common.kube import KubeClient
from tests.support.gpu_cluster import GpuCluster
from tests.support.workloads import apply, pods_of


def web(replicas: int) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                # As users write them: no requests, no spread constraints.
                "spec": {
                    "schedulerName": "topos",
                    "containers": [{"name": "nginx", "image": "nginx:1.27"}],
                },
            },
        },
    }


async def test_deployment_replicas_take_a_node_each(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    nodes = {await cluster.add_node(f"n{i}", "dgx-h100") for i in range(3)}
    async with cluster.coordinator():
        await apply(cluster, web(3))
        pods = await pods_of(cluster, "app=web", 3)
        placed = [(await cluster.bound(p["metadata"]["name"]))["spec"]["nodeName"] for p in pods]
    assert sorted(placed) == sorted(nodes), placed
