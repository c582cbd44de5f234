"""``spec.schedulingGates`` on the real control plane: a gated pod is not scheduled (the API
server would refuse its Binding anyway), keeps the ``PodScheduled`` condition the API server
gives it (reason ``SchedulingGated``) with no ``FailedScheduling`` Event, says what it waits for
in the coordinator's explanation, and is placed as soon as an edit removes its last gate —
kube-scheduler's SchedulingGates behaviour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.kube import PODS, KubeClient
from coordinator.engine.service import SchedulerRuntime
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import GpuCluster
from tests.support.polling import eventually

GATED = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "SchedulingGated",
    "message": "Scheduling is blocked due to non-empty scheduling gates",
}


def scheduled_condition(pod: dict[str, Any]) -> dict[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    found = next(c for c in conditions if c.get("type") == "PodScheduled")
    return {k: found.get(k) for k in GATED}


async def explained(runtime: SchedulerRuntime, key: str, message: str) -> None:
    """Wait until the coordinator's last attempt on ``key`` explains it with ``message``."""

    def attempt() -> bool:
        found = runtime.scheduler.last_attempt(key)
        return found is not None and found.message == message

    await eventually(attempt, what=f"{key} explained: {message}", timeout_s=30)


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
        both = "waiting for scheduling gates: example.com/quota, example.com/data"
        await explained(runtime, f"{namespace}/gated", both)
        await runtime.settle()
        obj = await cluster.pod("gated")
        assert not obj["spec"].get("nodeName")
        assert scheduled_condition(obj) == GATED  # not overwritten with Unschedulable
        assert await cluster.events("gated", reason="FailedScheduling") == []
        attempts = runtime.scheduler.stats.attempts

        # Removing one gate is not enough; removing the last one places the pod.
        await kube.patch(
            PODS,
            "gated",
            {"spec": {"schedulingGates": [{"name": "example.com/data"}]}},
            namespace=namespace,
        )
        await explained(
            runtime, f"{namespace}/gated", "waiting for scheduling gates: example.com/data"
        )
        await runtime.settle()
        assert scheduled_condition(await cluster.pod("gated")) == GATED
        await kube.patch(PODS, "gated", {"spec": {"schedulingGates": []}}, namespace=namespace)
        await cluster.bound("gated")
        assert await cluster.events("gated", reason="FailedScheduling") == []
    assert runtime.scheduler.stats.attempts <= attempts + 3  # tried on edits, not in a loop
