"""``spec.schedulingGates`` on the real control plane: a gated pod is not scheduled (the API
server would refuse its Binding anyway), says what it waits for, and is placed as soon as an
edit removes its last gate — kube-scheduler's SchedulingGates behaviour."""

from __future__ import annotations

from pathlib import Path

from common.kube import PODS, KubeClient
from tests.support.gpu_cluster import GpuCluster
from tests.support.pods import gpu_pod


async def test_a_gated_pod_waits_for_its_gates_then_is_placed(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("gpu", "dgx-h100")
    gated = gpu_pod("gated", 2, namespace=namespace)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}, {"name": "example.com/data"}]
    async with cluster.coordinator() as runtime:
        await cluster.create(gated)
        await cluster.create(gpu_pod("plain", 2, namespace=namespace))
        await cluster.bound("plain")  # an ungated pod beside it is served as usual
        message = await cluster.unschedulable("gated")
        assert message == "waiting for scheduling gates: example.com/quota, example.com/data"
        assert not (await cluster.pod("gated"))["spec"].get("nodeName")
        attempts = runtime.scheduler.stats.attempts

        # Removing one gate is not enough; removing the last one places the pod.
        await kube.patch(
            PODS,
            "gated",
            {"spec": {"schedulingGates": [{"name": "example.com/data"}]}},
            namespace=namespace,
        )
        message = await cluster.unschedulable("gated")
        await kube.patch(PODS, "gated", {"spec": {"schedulingGates": []}}, namespace=namespace)
        await cluster.bound("gated")
    assert runtime.scheduler.stats.attempts <= attempts + 3  # tried on edits, not in a loop
