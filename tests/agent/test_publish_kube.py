"""Publishing on the real kube-apiserver: labels and annotations land on the Node, a steady node
gets no PATCH (counted at an HTTP proxy in front of the API server), stale keys the agent owned
are removed while foreign keys — even under topos.io/ and nvidia.com/ — stay, and a missing Node
is a clear error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.kube import KubeNodeApi
from agent.publish import NodeNotFound, NodePublisher
from common import labels as L
from common.kube import NODES, KubeClient
from common.labeling import labels
from common.model import topology_from_json
from tests.support.agent_topologies import SEVEN_SMALL, mig_node, nvswitch_node
from tests.support.kube_objects import create_node
from tests.support.kube_proxy import counting_proxy

FOREIGN_LABELS = {
    L.LEAF: "leaf-a",
    "nvidia.com/gpu.deploy.driver": "true",
    "example.com/team": "ml",
}


async def _make_node(kube: KubeClient, name: str) -> None:
    await create_node(kube, name, labels=FOREIGN_LABELS, annotations={"example.com/owner": "infra"})


async def test_publish_then_steady_node_gets_no_patch(
    kube: KubeClient, kubeconfig: Path, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    name = unique_name("node")
    await _make_node(kube, name)
    desired = labels(nvswitch_node())
    async with counting_proxy(kubeconfig) as proxy:
        client = await KubeClient.connect(proxy.write_kubeconfig(tmp_path / "proxy.kubeconfig"))
        try:
            publisher = NodePublisher(KubeNodeApi(client), name)
            first = await publisher.publish(desired)
            second = await publisher.publish(desired)
            third = await publisher.publish(desired)
        finally:
            await client.close()
    path = f"/api/v1/nodes/{name}"
    assert first.patched
    assert not second.patched
    assert not third.patched
    assert proxy.count("PATCH", path) == 1  # only the first publish wrote
    assert proxy.count("GET", path) == 3
    assert len(proxy.requests) == 4

    node = await kube.get(NODES, name)
    meta = node["metadata"]
    for key, value in desired.labels.items():
        assert meta["labels"][key] == value
    assert meta["labels"][L.GPU_TOPOLOGY] == "nvswitch"
    assert meta["annotations"]["numa.kubenexus.io/node-0-cpus"] == "0-15,32-47"
    assert topology_from_json(meta["annotations"][L.TOPOLOGY]).gpus[0].uuid == "GPU-00000000-aaaa"
    owned = json.loads(meta["annotations"][L.OWNED_KEYS])
    assert set(owned["labels"]) == set(desired.labels)
    for key, value in FOREIGN_LABELS.items():
        assert meta["labels"][key] == value
    assert meta["annotations"]["example.com/owner"] == "infra"


async def test_stale_own_keys_removed_foreign_keys_kept(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("node")
    await _make_node(kube, name)
    publisher = NodePublisher(KubeNodeApi(kube), name)
    await publisher.publish(labels(mig_node((SEVEN_SMALL, SEVEN_SMALL))))
    meta = (await kube.get(NODES, name))["metadata"]
    assert meta["labels"]["nvidia.com/mig-1g.10gb.count"] == "14"
    assert meta["annotations"][L.MIG_LAYOUT] == "1g.10gb:14"

    # MIG switched off on both GPUs: the MIG groups must go, nobody else's keys may
    result = await publisher.publish(labels(mig_node(((), ()))))
    assert "label:nvidia.com/mig-1g.10gb.count" in result.removed
    meta = (await kube.get(NODES, name))["metadata"]
    assert not any(k.startswith("nvidia.com/mig-") for k in meta["labels"])
    assert L.MIG_LAYOUT not in meta["annotations"]
    assert L.NEURONETES_MIG_CONFIG not in meta["annotations"]
    assert meta["labels"][L.MIG_ENABLED] == "false"
    for key, value in FOREIGN_LABELS.items():
        assert meta["labels"][key] == value
    assert meta["annotations"]["example.com/owner"] == "infra"


async def test_missing_node_is_a_clear_error(kube: KubeClient) -> None:
    publisher = NodePublisher(KubeNodeApi(kube), "no-such-node-anywhere")
    with pytest.raises(NodeNotFound, match="node 'no-such-node-anywhere' not found"):
        await publisher.publish(labels(nvswitch_node(1)))
