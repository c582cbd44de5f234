"""AgentPool pods on the real control plane (created directly, as the AgentPool controller would
write them: label ``neuronetes.io/pool``, annotations ``neuronetes.io/model`` and
``neuronetes.io/scheduling``): with the price table in the ``scheduling`` config, a pod goes to
the node whose ``topos.io/models`` annotation holds its model, and — when both nodes hold it — to
the cheaper node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from common import labels as L
from common.kube import NODES, KubeClient
from coordinator.app.config.scheduling import load_config
from coordinator.core.registry import build_framework
from devcluster.pods import pod
from tests.support.gpu_cluster import GpuCluster

pytestmark = pytest.mark.kube

SCHEDULING = {
    "percentageOfNodesToScore": 100,
    "prices": {"instanceTypes": {"p5.48xlarge": 98.32, "p5e.48xlarge": 120.0}},
}


def pool_pod(name: str, model: str, namespace: str) -> dict[str, Any]:
    return pod(
        name,
        gpus=1,
        namespace=namespace,
        labels={"neuronetes.io/pool": "chat"},
        annotations={
            "neuronetes.io/model": model,
            "neuronetes.io/scheduling": json.dumps(
                {"cacheAware": {"enabled": True}, "costOptimization": {"enabled": True}},
                separators=(",", ":"),
            ),
        },
    )


async def test_the_cached_node_wins_and_with_equal_caches_the_cheaper_one(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    # "a-dear" sorts first: with no cost scorer a tie would go to it.
    dear = await cluster.add_node(
        "a-dear", "dgx-h100", labels_extra={"node.kubernetes.io/instance-type": "p5e.48xlarge"}
    )
    cheap = await cluster.add_node(
        "b-cheap", "dgx-h100", labels_extra={"node.kubernetes.io/instance-type": "p5.48xlarge"}
    )
    for node, models in ((dear, ["org/big-model", "org/chat-model"]), (cheap, ["org/chat-model"])):
        await kube.patch(NODES, node, {"metadata": {"annotations": {L.MODELS: json.dumps(models)}}})
    async with cluster.coordinator() as runtime:
        runtime.scheduler.framework = build_framework(load_config(SCHEDULING))
        # Both nodes cache the chat model: the cheaper one by the price table.
        await cluster.create(pool_pod("chat-0", "org/chat-model", namespace))
        assert (await cluster.bound("chat-0"))["spec"]["nodeName"] == cheap
        # Only the dearer node caches the big model: the cache outweighs the price (and the
        # bin-packing pull towards the node already running chat-0).
        await cluster.create(pool_pod("big-0", "org/big-model", namespace))
        assert (await cluster.bound("big-0"))["spec"]["nodeName"] == dear
