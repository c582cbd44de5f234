"""End to end on the real control plane: shares of one GPU under churn, as notebook users cause it.

Fleet: one DGX H100 with seven GPUs taken whole, so every half below must go to the one GPU left
(or wait). Two halves fill it; a third is explained as waiting, naming the share it asked for. A
half deleted (grace 0) gives its room to the waiting one at once; a half that finished
(``Succeeded``) gives its room to the next one too — a pod re-applied under the deleted half's name
is a new pod and takes it. None of them is ever put on a GPU held whole or past a whole GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.kube import PODS, KubeClient
from devcluster.pods import gpu_pod, pod
from tests.support.gpu_cluster import GpuCluster, assignment

#: A share waiting for room is placed well within this once the room is freed.
PROMPTLY_S = 10.0


def _half(name: str) -> dict[str, Any]:
    return pod(name, namespace=None, annotations={"topos.io/gpu-fraction": "0.5"})


def _gpu(placed: dict[str, Any]) -> str:
    _, gpus, _ = assignment(placed)
    assert len(gpus) == 1, gpus
    assert placed["metadata"]["annotations"]["topos.io/gpu-share"].startswith("fraction=0.5,")
    return gpus[0]


async def test_a_deleted_or_finished_half_gives_its_room_to_the_next(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("churn", "dgx-h100")
    async with cluster.coordinator():
        await cluster.create(gpu_pod("fill", 7))
        whole = set(assignment(await cluster.bound("fill"))[1])
        first = await cluster.create(_half("a"))
        gpu = _gpu(await cluster.bound("a"))
        await cluster.create(_half("b"))
        assert _gpu(await cluster.bound("b")) == gpu
        assert gpu not in whole

        await cluster.create(_half("c"))
        message = await cluster.unschedulable("c")
        assert message == "0/1 nodes are available: 1 node(s) had no GPU with room for the share."

        await kube.delete(PODS, "a", namespace=namespace, grace_period_seconds=0)
        assert _gpu(await cluster.bound("c", timeout_s=PROMPTLY_S)) == gpu

        again = await cluster.create(_half("a"))  # re-applied under the deleted pod's name
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
        assert "0/1 nodes are available" in await cluster.unschedulable("a")

        await kube.patch(
            PODS,
            "b",
            {"status": {"phase": "Succeeded"}},
            namespace=namespace,
            subresource="status",
        )
        placed = await cluster.bound("a", timeout_s=PROMPTLY_S)
    assert placed["metadata"]["uid"] == again["metadata"]["uid"]
    assert _gpu(placed) == gpu
