"""End to end on the real control plane: deleting a pod and applying it again, as everyone does.

A pod re-created under a just-deleted pod's name is a new pod (a new UID): it is placed at once
with its own ``Scheduled`` Event, never held back by what the scheduler remembered about its
predecessor. GPUs of pods deleted right after binding are free at once for the next pod.

Fleet: one DGX H100 (8 GPUs), so every placement below needs the GPUs the deleted pods held.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.kube import EVENTS, PODS, KubeClient
from coordinator.adapters.kube.writer import KubeClusterWriter
from coordinator.engine.ports import PodRef
from devcluster.kube_wait import scheduled_message, wait_for
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import GpuCluster, assignment

#: Where a pod used to stall 60-70 s; a healthy run binds in well under a second.
PROMPTLY_S = 10.0


async def one_dgx(kube: KubeClient, kubeconfig: Path, namespace: str) -> GpuCluster:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("dgx", "dgx-h100")
    return cluster


async def scheduled_event(kube: KubeClient, namespace: str, uid: str) -> dict[str, Any]:
    """The ``Scheduled`` Event about the pod with this UID (not any pod of the same name)."""
    return await wait_for(
        kube,
        EVENTS,
        lambda events: events[0] if events else None,
        namespace=namespace,
        field_selector=f"reason=Scheduled,involvedObject.uid={uid}",
        what=f"a Scheduled Event about uid {uid}",
    )


async def test_a_pod_recreated_under_a_deleted_pods_name_is_placed_at_once(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = await one_dgx(kube, kubeconfig, namespace)
    async with cluster.coordinator():
        first = await cluster.create(gpu_pod("train", 8))
        await cluster.bound("train")
        await kube.delete(PODS, "train", namespace=namespace, grace_period_seconds=0)
        second = await cluster.create(gpu_pod("train", 8))
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        bound = await cluster.bound("train", timeout_s=PROMPTLY_S)
        event = await scheduled_event(kube, namespace, second["metadata"]["uid"])
    assert bound["metadata"]["uid"] == second["metadata"]["uid"]
    node, gpus, _ = assignment(bound)
    assert len(gpus) == 8
    assert event["message"].startswith(f"Successfully assigned {namespace}/train to {node}")
    assert scheduled_message(bound, status="False") is None  # never explained as waiting


async def test_gpus_of_pods_deleted_right_after_binding_are_free_at_once(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = await one_dgx(kube, kubeconfig, namespace)
    async with cluster.coordinator() as runtime:
        uids = [
            (await cluster.create(gpu_pod(f"short-{i}", 1)))["metadata"]["uid"] for i in range(8)
        ]
        for i in range(8):
            await cluster.bound(f"short-{i}")
            await kube.delete(PODS, f"short-{i}", namespace=namespace, grace_period_seconds=0)
        await cluster.create(gpu_pod("whole-node", 8))
        bound = await cluster.bound("whole-node", timeout_s=PROMPTLY_S)
        held = [uid for uid in uids if runtime.scheduler.view.held(uid) is not None]
    assert held == []  # nothing is held for the deleted pods any more
    assert len(assignment(bound)[1]) == 8


async def test_an_explanation_meant_for_a_deleted_pod_never_lands_on_its_successor(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = await one_dgx(kube, kubeconfig, namespace)
    writer = KubeClusterWriter(kube)
    old = await cluster.create(gpu_pod("late", 1))
    await kube.delete(PODS, "late", namespace=namespace, grace_period_seconds=0)
    new = await cluster.create(gpu_pod("late", 1))
    # A failure decided for the old pod and written after the new one exists: refused quietly,
    # a nomination written with it too.
    stale = PodRef(namespace, "late", old["metadata"]["uid"])
    assert not await writer.explain(stale, "0/1 nodes are available: stale.")
    assert not await writer.explain(stale, "0/1 nodes: preempting.", nominated="dgx-0")
    current = await cluster.pod("late")
    assert current["metadata"]["uid"] == new["metadata"]["uid"]
    assert scheduled_message(current) is None
    assert "nominatedNodeName" not in current["status"]
    # The same write for the pod that exists is applied.
    fresh = PodRef(namespace, "late", new["metadata"]["uid"])
    assert await writer.explain(fresh, "0/1 nodes are available: fresh.")
    assert scheduled_message(await cluster.pod("late")) == "0/1 nodes are available: fresh."
