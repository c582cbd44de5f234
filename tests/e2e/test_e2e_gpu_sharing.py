"""End to end on the real control plane: pods sharing one GPU (docs/sharing.md).

Two pods asking ``topos.io/gpu-fraction: "0.5"`` (and no ``nvidia.com/gpu``) on one DGX H100 are
bound to the same GPU, each annotated with it and with its share; the ``Scheduled`` Event says
which part of which GPU. A coordinator started afresh
reads the shares back from those annotations: the next half goes to another GPU, since the first
is full, and a pod asking for more GPU memory than any GPU has is told so, naming the key.
"""

from __future__ import annotations

from pathlib import Path

from common.kube import KubeClient
from devcluster.pods import pod
from tests.support.gpu_cluster import GpuCluster, assignment, gpu_indices


def _half(name: str) -> dict[str, object]:
    return pod(name, namespace=None, annotations={"topos.io/gpu-fraction": "0.5"})


async def test_two_halves_share_a_gpu_and_a_restart_reads_the_shares_back(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    node = await cluster.add_node("share", "dgx-h100")
    async with cluster.coordinator():
        await cluster.create(_half("a"))
        a = await cluster.bound("a")
        await cluster.create(_half("b"))
        b = await cluster.bound("b")
        scheduled = await cluster.event("Scheduled", name="b")
    node_a, gpus_a, _ = assignment(a)
    node_b, gpus_b, _ = assignment(b)
    assert node_a == node_b == node
    assert len(gpus_a) == 1
    assert gpus_a == gpus_b  # one GPU, two holders
    for placed in (a, b):
        share = placed["metadata"]["annotations"]["topos.io/gpu-share"]
        assert share.startswith("fraction=0.5,memory=")
    # kubectl describe pod: the Event says it is part of a GPU, which one, and how much memory
    (index,) = gpu_indices(cluster.topologies[node], gpus_b)
    numa = cluster.topologies[node].gpus[index].numa_node
    assert scheduled["message"] == (
        f"Successfully assigned {namespace}/b to {node} "
        f"(0.5 of GPU {index}, 39.8Gi of its memory; NUMA {numa})"
    )

    async with cluster.coordinator():  # a restart: only the API server's word is left
        await cluster.create(_half("c"))
        c = await cluster.bound("c")
        big = pod("big", namespace=None, annotations={"topos.io/gpu-memory": "200Gi"})
        await cluster.create(big)
        message = await cluster.unschedulable("big")
    assert assignment(c)[1] != gpus_a  # the shared GPU is full
    assert "topos.io/gpu-memory]: no GPU has 200Gi; largest is 79.6Gi" in message, message
