"""The share written where Deployment users write things — on the Deployment, not its pod
template — on the real control plane, where kube-controller-manager makes the replicas: each
replica asks for half a GPU as if the annotation were its own, so two replicas share one GPU and
each carries ``topos.io/gpu-share``. Scaled to three, the third takes half of another GPU."""

from __future__ import annotations

from typing import Any

from common.kube import PODS
from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import assignment
from tests.support.workloads import apply, scale


def notebooks(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "notebooks", "annotations": {"topos.io/gpu-fraction": "0.5"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "notebooks"}},
            "template": {
                "metadata": {"labels": {"app": "notebooks"}},
                "spec": {
                    "schedulerName": "topos",
                    "containers": [
                        {
                            "name": "lab",
                            "image": "jupyter:1",
                            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                        }
                    ],
                },
            },
        },
    }


async def _gpus(cluster: GangCluster, names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        pod = await cluster.kube.get(PODS, name, namespace=cluster.namespace)
        assert pod["metadata"]["annotations"]["topos.io/gpu-share"].startswith("fraction=0.5,")
        _, gpus, _ = assignment(pod)
        assert len(gpus) == 1, gpus
        out[name] = gpus[0]
    return out


async def test_a_fraction_on_the_deployment_makes_its_replicas_share_gpus(
    cluster: GangCluster,
) -> None:
    (node,) = await cluster.fabric(
        spines=1, leaves_per_spine=1, nodes_per_leaf=1, profile="dgx-h100"
    )
    async with cluster.gang_coordinator():
        await apply(cluster, notebooks(2))
        two = await cluster.all_bound("app=notebooks", 2)
        first = await _gpus(cluster, sorted(two))
        await scale(cluster, "notebooks", 3)
        three = await cluster.all_bound("app=notebooks", 3)
        after = await _gpus(cluster, sorted(three))
    assert set(two.values()) == set(three.values()) == {node}
    assert len(set(first.values())) == 1  # the two replicas share one GPU
    (third,) = set(three) - set(two)
    assert after[third] not in set(first.values())  # that GPU is full: half of another
