"""End to end on the real control plane: pod-level resources (PodLevelResources, beta and on since
Kubernetes 1.34; scheduler_perf's NodeDeclaredFeatures pods use them). A pod that writes only
``spec.resources.limits`` gets its pod-level requests from the API server's defaulting, and Topos
counts those — not its containers' empty requests — when it places the pod and when it fits the
next pod beside it, as kube-scheduler does."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.kube import NODES, KubeClient
from devcluster.pods import pod
from tests.support.gpu_cluster import GpuCluster

pytestmark = pytest.mark.kube


async def test_pod_level_cpu_is_held_on_the_node_and_the_next_pod_does_not_fit(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    node = await cluster.add_node("only", "dgx-h100")
    cores = int((await kube.get(NODES, node))["status"]["allocatable"]["cpu"])
    holder = pod("holder", namespace=namespace, cpu=None, memory=None)
    holder["spec"]["resources"] = {"limits": {"cpu": str(cores - 1), "memory": "1Gi"}}
    async with cluster.coordinator():
        created = await cluster.create(holder)
        # The API server's default: pod-level requests from the pod-level limits.
        assert created["spec"]["resources"]["requests"]["cpu"] == str(cores - 1)
        assert (await cluster.bound("holder"))["spec"]["nodeName"] == node
        await cluster.create(pod("two", namespace=namespace, cpu="2"))
        message = await cluster.unschedulable("two")
        await cluster.create(pod("one", namespace=namespace, cpu="1"))
        assert (await cluster.bound("one"))["spec"]["nodeName"] == node
    assert "Insufficient cpu" in message
