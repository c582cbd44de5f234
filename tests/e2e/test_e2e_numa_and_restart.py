"""End to end on the real control plane: bad pods that must stay Pending with an Event naming the
bad field while everyone else is served, bind conflicts, and a coordinator restart that must not
hand out any GPU twice. (The KubeNexus NUMA examples of seed 002 are in
tests/e2e_seeds/test_seed_002_manifests.py.)

Fleet: two DGX H100 nodes (8 GPUs, two NUMA nodes of 48 CPUs and ~503 GiB, GPUs 0-3 on NUMA 0
and 4-7 on NUMA 1), labelled by the agent's own labelers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.kube import PODS, Invalid, KubeClient
from coordinator.adapters.kube.writer import KubeClusterWriter
from coordinator.engine.ports import BindConflict, PodRef
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import GpuCluster, Kubectl, assignment, describe


async def h100_pair(kube: KubeClient, kubeconfig: Path, namespace: str) -> GpuCluster:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    for name in ("numa-a", "numa-b"):
        await cluster.add_node(name, "dgx-h100")
    return cluster


BAD_PODS: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown-policy",
        gpu_pod("unknown-policy", 1, annotations={"topos.io/numa-policy": "fastest"}),
        "metadata.annotations[topos.io/numa-policy]: unknown value 'fastest'",
    ),
    (
        # A KubeNexus manifest is told about the key it wrote, not about our canonical name.
        "kubenexus-policy",
        gpu_pod("kubenexus-policy", 1, annotations={"numa.scheduling.kubenexus.io/policy": "hard"}),
        "metadata.annotations[numa.scheduling.kubenexus.io/policy]: unknown value 'hard'",
    ),
    (
        "malformed-quantity",
        gpu_pod("malformed-quantity", 1, annotations={"topos.io/gpu-memory-min": "lots"}),
        "metadata.annotations[topos.io/gpu-memory-min]",
    ),
    (
        "negative-memory",
        gpu_pod("negative-memory", 1, annotations={"topos.io/gpu-memory-min": "-5Gi"}),
        "metadata.annotations[topos.io/gpu-memory-min]",
    ),
    (
        "absurd-gpus",
        gpu_pod("absurd-gpus", 1000),
        "limits[nvidia.com/gpu]: 1000 GPUs is more than any node holds",
    ),
    (
        "unknown-mig",
        {
            **gpu_pod("unknown-mig", 1),
            "spec": {
                "schedulerName": "topos",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/mig-9g.99gb": "1"}},
                    }
                ],
            },
        },
        "unknown MIG profile '9g.99gb'",
    ),
    (
        "contradictory",
        gpu_pod(
            "contradictory",
            1,
            annotations={
                "topos.io/numa-policy": "single-numa",
                "numa.scheduling.kubenexus.io/policy": "isolated",
            },
        ),
        "contradictory annotations",
    ),
]


async def test_bad_pods_stay_pending_with_the_bad_field_named_and_others_are_served(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    cluster = await h100_pair(kube, kubeconfig, namespace)
    # The API server itself refuses a negative GPU count; nothing reaches the scheduler.
    with pytest.raises(Invalid):
        await cluster.create(gpu_pod("negative-gpus", -1))
    async with cluster.coordinator() as runtime:
        for _, manifest, _ in BAD_PODS:
            await cluster.create(manifest)
        await cluster.create(gpu_pod("good", 2))
        good = await cluster.bound("good")
        messages = {name: await cluster.unschedulable(name) for name, _, _ in BAD_PODS}
        events = {name: await cluster.warning(name) for name, _, _ in BAD_PODS}
        event = events["unknown-policy"]
        # Scheduling goes on after the bad pods.
        await cluster.create(gpu_pod("good-after", 1))
        await cluster.bound("good-after")
        assert runtime.scheduler.stats.invalid == len(BAD_PODS)
    assert assignment(good)[1]
    for name, _, expected in BAD_PODS:
        assert "pod spec is invalid" in messages[name], messages[name]
        assert expected in messages[name], messages[name]
        assert expected in describe(kubectl, namespace, name)
    assert event["type"] == "Warning"
    assert event["source"]["component"] == "topos"


async def test_bind_conflicts_are_reported_not_forced(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = await h100_pair(kube, kubeconfig, namespace)
    node = next(iter(cluster.topologies))
    writer = KubeClusterWriter(kube)
    created = await cluster.create(gpu_pod("target", 1))
    ref = PodRef(namespace, "target", created["metadata"]["uid"])
    # A decision made for an earlier pod of the same name (different uid) is refused.
    with pytest.raises(BindConflict):
        await writer.bind(PodRef(namespace, "target", "0" * 8 + "-dead-beef"), node, {})
    await writer.bind(ref, node, {"topos.io/assigned-gpus": "x"})
    bound = await cluster.pod("target")
    assert bound["spec"]["nodeName"] == node
    # Already bound: a second bind is a conflict, not a move.
    with pytest.raises(BindConflict):
        await writer.bind(ref, next(n for n in cluster.topologies if n != node), {})
    # Deleted: a conflict too.
    await kube.delete(PODS, "target", namespace=namespace, grace_period_seconds=0)
    with pytest.raises(BindConflict):
        await writer.bind(ref, node, {})


async def test_restart_rebuilds_gpu_assignments_and_never_assigns_a_gpu_twice(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = await h100_pair(kube, kubeconfig, namespace)
    async with cluster.coordinator():
        for i in range(3):
            await cluster.create(gpu_pod(f"first-{i}", 3))
        first = [await cluster.bound(f"first-{i}") for i in range(3)]
    # A new coordinator: a fresh inventory from the API server and the agents' hellos.
    async with cluster.coordinator() as runtime:
        for i in range(7):
            await cluster.create(gpu_pod(f"second-{i}", 1))
        second = [await cluster.bound(f"second-{i}") for i in range(7)]
        await cluster.create(gpu_pod("one-too-many", 1))
        message = await cluster.unschedulable("one-too-many")
        explained = runtime.scheduler.last_attempt(f"{namespace}/one-too-many")
    assigned: list[tuple[str, str]] = []
    for pod in first + second:
        node, gpus, _ = assignment(pod)
        valid = {g.uuid for g in cluster.topologies[node].gpus}
        assert set(gpus) <= valid
        assigned.extend((node, g) for g in gpus)
    assert len(assigned) == 16
    assert len(set(assigned)) == 16, "a GPU was assigned twice across the restart"
    assert message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert explained is not None
    assert explained.outcome == "unschedulable"
