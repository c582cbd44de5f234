"""End to end on the real control plane: a CPU-only Deployment's replicas, made by
kube-controller-manager and declaring no topologySpreadConstraints, are spread one per node by
Topos, as by kube-scheduler's default topology spreading (their ReplicaSet's selector,
watched) — unless the Deployment asks ``topos.io/placement: consolidated``."""

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


async def test_a_consolidated_deployment_shares_a_node(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    """The annotation on the Deployment (not its template) reaches the replicas; three 2-GPU
    replicas fit one 8-GPU node, and go there however the controller spaces their creation."""
    cluster = GpuCluster(kube, kubeconfig, namespace)
    for i in range(3):
        await cluster.add_node(f"n{i}", "dgx-h100")
    deployment = web(3)
    deployment["metadata"] = {"name": "web", "annotations": {"topos.io/placement": "consolidated"}}
    template = deployment["spec"]["template"]["spec"]  # type: ignore[index]
    template["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 2}}
    async with cluster.coordinator():
        await apply(cluster, deployment)
        pods = await pods_of(cluster, "app=web", 3)
        placed = [(await cluster.bound(p["metadata"]["name"]))["spec"]["nodeName"] for p in pods]
    assert len(set(placed)) == 1, placed
