"""Seed 002 (KubeNexus) as its objects are written — NUMA policy annotations on Pods, gang labels
on Pods, on Jobs' pod templates and on a Deployment's — applied on the real control plane, where
kube-controller-manager's Job and ReplicaSet controllers make the pods. Only ``schedulerName``
differs from the seed, plus what the API server refuses without: a Job template's
``restartPolicy``, and ``nvidia.com/gpu`` in ``limits`` where the seed asks for it in
``requests`` only (an extended resource must have a limit equal to its request).

Fleet: DGX H100 nodes — 8 GPUs, two NUMA nodes of 48 CPUs, GPUs 0-3 on NUMA 0 and 4-7 on
NUMA 1 — each agent's inventory giving the NUMA layout the seed's policies are about. The
KubeSchedulerConfiguration is checked by ``tests/coordinator/app/test_seed_config.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from common.kube import NODES
from devcluster.pods import gpu_pod
from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import Kubectl, assignment, describe, gpu_indices
from tests.support.workloads import apply, pods_of

GROUP = "pod-group.scheduling.kubenexus.io/name"


@pytest.fixture
def cluster(kube: Any, kubeconfig: Any, namespace: str) -> GangCluster:
    return GangCluster(kube, kubeconfig, namespace)


async def h100s(cluster: GangCluster, count: int) -> list[str]:
    return [await cluster.add_node(f"numa-{i}", "dgx-h100") for i in range(count)]


def numa_aligned(cluster: GangCluster, pod: dict[str, Any]) -> tuple[str, int]:
    """(node, NUMA node) of a pod whose GPUs, CPUs and memory all come from one NUMA node."""
    where, gpus, numa = assignment(pod)
    assert len(numa) == 1, pod["metadata"].get("annotations")
    topo = cluster.topologies[where]
    assert {topo.gpus[i].numa_node for i in gpu_indices(topo, gpus)} <= set(numa)
    return where, numa[0]


WORKER = """
apiVersion: v1
kind: Pod
metadata:
  name: worker-{i}
  labels:
    pod-group.scheduling.kubenexus.io/name: "distributed-training"
    pod-group.scheduling.kubenexus.io/min-available: "4"
spec:
  schedulerName: topos
  containers:
  - name: worker
    image: pytorch/pytorch:latest
    resources:
      requests:
        cpu: "4"
        memory: "8Gi"
"""


async def test_a_lone_gang_worker_waits_for_its_pod_group_then_all_four_start(
    cluster: GangCluster,
) -> None:
    await h100s(cluster, 2)
    async with cluster.gang_coordinator():
        await apply(cluster, WORKER.format(i=0))
        # The seed's first troubleshooting entry: pending, "waiting for pod group".
        message = await cluster.condition("worker-0", "waiting for pod group")
        assert "distributed-training" in message
        assert "waiting for all 4 pods to exist" in message
        assert (await cluster.pod("worker-0"))["spec"].get("nodeName") is None
        for i in range(1, 4):
            await apply(cluster, WORKER.format(i=i))
        placed = await cluster.all_bound(f"{GROUP}=distributed-training", 4)
    assert sorted(placed) == [f"worker-{i}" for i in range(4)]


ML_TRAINING = """
apiVersion: v1
kind: Pod
metadata:
  name: ml-training
  annotations:
    numa.scheduling.kubenexus.io/policy: "single-numa"
    numa.scheduling.kubenexus.io/resources: "cpu,memory,nvidia.com/gpu"
spec:
  schedulerName: topos
  containers:
  - name: training
    image: nvcr.io/nvidia/pytorch:latest
    resources:
      requests:
        cpu: "{cpu}"
        memory: "64Gi"
        nvidia.com/gpu: "2"
      limits:
        nvidia.com/gpu: "2"
"""
HPC = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations:
    numa.scheduling.kubenexus.io/policy: "isolated"
    numa.scheduling.kubenexus.io/resources: "cpu,memory"
spec:
  schedulerName: topos
  containers:
  - name: simulation
    image: {image}
    resources:
      requests:
        cpu: "32"
        memory: "128Gi"
{limits}
"""
# The NUMA section's HPC pod (requests only) and scenario 3's (limits equal to the requests).
HPC_REQUESTS = HPC.format(name="hpc-simulation", image="my-hpc-app:latest", limits="")
HPC_GUARANTEED = HPC.format(
    name="hpc-simulation-exclusive",
    image="hpc-app:latest",
    limits='      limits:\n        cpu: "32"\n        memory: "128Gi"',
)


async def test_numa_policies_align_isolate_and_explain_what_no_numa_node_can_hold(
    cluster: GangCluster, kubectl: Kubectl
) -> None:
    """Two nodes, four NUMA nodes: ml-training takes one, three isolated pods one each."""
    await h100s(cluster, 2)
    third = HPC_REQUESTS.replace("name: hpc-simulation", "name: hpc-third")
    fourth = HPC_REQUESTS.replace("name: hpc-simulation", "name: hpc-fourth")
    async with cluster.gang_coordinator():
        await apply(cluster, ML_TRAINING.format(cpu=16))
        training = await cluster.bound("ml-training")
        # The seed's third troubleshooting entry: 64 CPUs fit a node, not one NUMA node's 48.
        await apply(cluster, ML_TRAINING.format(cpu=64).replace("ml-training", "wide-training"))
        wide = await cluster.unschedulable("wide-training")
        await cluster.warning("wide-training")  # the Event is written after the condition
        for manifest in (HPC_REQUESTS, HPC_GUARANTEED, third):
            await apply(cluster, manifest)
        names = ("hpc-simulation", "hpc-simulation-exclusive", "hpc-third")
        hpc = [await cluster.bound(n) for n in names]
        # Every NUMA node has a pod now: a fourth isolated pod must wait.
        await apply(cluster, fourth)
        crowded = await cluster.unschedulable("hpc-fourth")
    used = [numa_aligned(cluster, training)]
    for pod in hpc:
        assert assignment(pod)[1] == []  # isolated asks no GPU; it still gets a NUMA node
        used.append(numa_aligned(cluster, pod))
    assert len(set(used)) == 4, "an isolated NUMA node is shared"
    assert crowded == "0/2 nodes are available: 2 no NUMA node is free of other pods."
    assert wide == "0/2 nodes are available: 2 no single NUMA node has sufficient capacity."
    text = describe(kubectl, cluster.namespace, "wide-training")  # as a person reads it
    assert "FailedScheduling" in text
    assert "no single NUMA node has sufficient capacity" in text


async def test_a_node_no_agent_has_described_is_explained_and_labelled_nodes_count_numa(
    cluster: GangCluster,
) -> None:
    """The seed's second troubleshooting entry ("no nodes with NUMA topology", nodes missing
    their NUMA labels): a node whose agent has published nothing is named as such, while an
    agent-labelled node answers the seed's ``kubectl get nodes -L numa.kubenexus.io/node-count``."""
    (described,) = await h100s(cluster, 1)
    bare = await cluster.add_node("bare", "dgx-h100")
    del cluster.topologies[bare]  # its agent never said hello
    published = (await cluster.kube.get(NODES, bare))["metadata"]["annotations"]
    await cluster.kube.patch(NODES, bare, {"metadata": {"annotations": dict.fromkeys(published)}})
    only_bare = ML_TRAINING.format(cpu=16).replace(
        "spec:\n", f"spec:\n  nodeSelector: {{kubernetes.io/hostname: {bare}}}\n", 1
    )
    async with cluster.gang_coordinator():
        await apply(cluster, only_bare)
        message = await cluster.unschedulable("ml-training")
    assert message == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had no GPU topology from a Topos agent yet."
    )
    labels = (await cluster.kube.get(NODES, described))["metadata"]["labels"]
    assert labels["numa.kubenexus.io/node-count"] == "2"


DISTRIBUTED_TRAINING = """
apiVersion: batch/v1
kind: Job
metadata:
  name: distributed-training
spec:
  parallelism: 8
  completions: 8
  template:
    metadata:
      labels:
        pod-group.scheduling.kubenexus.io/name: "training-job"
        pod-group.scheduling.kubenexus.io/min-available: "8"
    spec:
      schedulerName: topos
      restartPolicy: Never
      containers:
      - name: worker
        image: pytorch/pytorch:latest
        resources:
          requests:
            cpu: "4"
            memory: "16Gi"
            nvidia.com/gpu: "1"
          limits:
            nvidia.com/gpu: "1"
"""


async def test_the_eight_worker_job_starts_all_at_once_on_one_node(cluster: GangCluster) -> None:
    await h100s(cluster, 2)
    async with cluster.gang_coordinator():
        await apply(cluster, DISTRIBUTED_TRAINING)
        placed = await cluster.all_bound(f"{GROUP}=training-job", 8)
        pods = await cluster.pods(f"{GROUP}=training-job")
    # 8 × 1 GPU fits one 8-GPU node: the gang takes the narrowest domain, each worker a GPU.
    assert len(set(placed.values())) == 1, placed
    assert len({assignment(p)[1][0] for p in pods}) == 8
    assert all(p["metadata"]["labels"]["job-name"] == "distributed-training" for p in pods)


MULTI_GPU_TRAINING = """
apiVersion: batch/v1
kind: Job
metadata:
  name: multi-gpu-training
spec:
  parallelism: 4
  completions: 4
  template:
    metadata:
      labels:
        pod-group.scheduling.kubenexus.io/name: "gpu-training"
        pod-group.scheduling.kubenexus.io/min-available: "4"
      annotations:
        numa.scheduling.kubenexus.io/policy: "single-numa"
        numa.scheduling.kubenexus.io/resources: "cpu,memory,nvidia.com/gpu"
    spec:
      schedulerName: topos
      restartPolicy: Never
      containers:
      - name: worker
        image: nvcr.io/nvidia/pytorch:latest
        resources:
          requests:
            cpu: "16"
            memory: "64Gi"
            nvidia.com/gpu: "2"
          limits:
            nvidia.com/gpu: "2"
"""


async def test_numa_aligned_training_job_is_all_or_nothing(cluster: GangCluster) -> None:
    """Two GPUs of NUMA 0 are taken: three of the four NUMA-aligned workers would fit, so none
    starts; once they are free all four do, two to each NUMA node."""
    (h100,) = await h100s(cluster, 1)
    async with cluster.gang_coordinator():
        await cluster.create(
            gpu_pod(
                "holder",
                2,
                labels={"role": "holder"},
                annotations={"topos.io/numa-policy": "single-numa"},
            )
        )
        await cluster.bound("holder")
        await apply(cluster, MULTI_GPU_TRAINING)
        workers = await pods_of(cluster, f"{GROUP}=gpu-training", 4)
        first = workers[0]["metadata"]["name"]
        message = await cluster.condition(first, "could not hold the pod group")
        assert all(v is None for v in (await cluster.placement(f"{GROUP}=gpu-training")).values())
        await cluster.delete_pods("role=holder")
        placed = await cluster.all_bound(f"{GROUP}=gpu-training", 4)
        pods = await cluster.pods(f"{GROUP}=gpu-training")
    assert set(placed.values()) == {h100}
    per_numa = Counter(numa_aligned(cluster, p)[1] for p in pods)
    assert per_numa == {0: 2, 1: 2}
    # The seed's "waiting for pod group", with why the group cannot start yet.
    assert message.startswith("waiting for pod group gpu-training: 0/4 members placed"), message
    assert "4 pods need 8 nvidia.com/gpu" in message
    assert "eligible nodes have 6 nvidia.com/gpu" in message


SPARK = """
apiVersion: v1
kind: Pod
metadata:
  name: spark-driver
  labels:
    pod-group.scheduling.kubenexus.io/name: "spark-job-123"
    pod-group.scheduling.kubenexus.io/min-available: "11"
    spark-role: driver
spec:
  schedulerName: topos
  containers:
  - name: spark
    image: spark:3.5.0
    resources:
      requests:
        cpu: "2"
        memory: "4Gi"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: spark-executor
spec:
  replicas: 10
  selector:
    matchLabels:
      spark-role: executor
  template:
    metadata:
      labels:
        pod-group.scheduling.kubenexus.io/name: "spark-job-123"
        pod-group.scheduling.kubenexus.io/min-available: "11"
        spark-role: executor
    spec:
      schedulerName: topos
      containers:
      - name: executor
        image: spark:3.5.0
        resources:
          requests:
            cpu: "4"
            memory: "8Gi"
"""


async def test_spark_driver_waits_for_the_executor_deployment_then_eleven_start(
    cluster: GangCluster,
) -> None:
    await h100s(cluster, 2)
    driver, executors = SPARK.split("---")
    async with cluster.gang_coordinator():
        await apply(cluster, driver)
        message = await cluster.condition("spark-driver", "waiting for pod group")
        assert "spark-job-123" in message
        await apply(cluster, executors)
        placed = await cluster.all_bound(f"{GROUP}=spark-job-123", 11)
    roles = Counter(name.startswith("spark-executor-") for name in placed)
    assert roles == {True: 10, False: 1}
