"""The NeuroNetes controller as the coordinator runs it: wired by ``wire()`` against the API server,
serving the pools of the scheduler's namespace once this coordinator leads."""

from __future__ import annotations

import asyncio
from pathlib import Path

from common.kube import KubeClient
from coordinator.adapters.kube.agentpools import AGENT_POOLS
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import LEADER
from coordinator.app.main import running, wire
from devcluster.kube_wait import wait_for_pods
from tests.support.gpu_cluster import Kubectl
from tests.support.neuronetes import install_crds


def _pool(name: str) -> dict[str, object]:
    return {
        "apiVersion": "neuronetes.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name},
        "spec": {"model": "tiny", "minReplicas": 2},
    }


async def test_the_leading_coordinator_serves_agentpools(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    config = parse_config({"scheduler": {"namespace": namespace}})
    app = wire(config, KubeBackend(str(kubeconfig)))
    async with running(app):
        await asyncio.wait_for(app[LEADER].wait_until_leading(), 120)
        await kube.create(AGENT_POOLS, _pool("tiny"), namespace=namespace)
        pods = await wait_for_pods(
            kube,
            namespace,
            lambda pods: pods if len(pods) == 2 else None,
            label_selector="neuronetes.io/pool=tiny",
            what="the pool's two pods",
        )
    container = pods[0]["spec"]["containers"][0]
    assert (container["name"], container["image"]) == ("server", "vllm/vllm-openai:latest")
    assert container["args"] == ["--model", "tiny"]
