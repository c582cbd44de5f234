"""The seed guides' gang examples, written as the pods their controllers would create, with only
``schedulerName`` changed to ``topos``: the KubeNexus Spark job (a driver and 10 executors, min
11, no GPUs) and the 8-worker PyTorch Job (1 GPU each, min 8).

The PyTorch template asks for ``nvidia.com/gpu`` in ``requests`` only; the API server requires
extended resources in ``limits``, so the pod as created carries the same amount in both (what the
API server's defaulting would need the user to write for any scheduler).
"""

from __future__ import annotations

import yaml

from tests.support.gang_cluster import GangCluster

SPARK_DRIVER = """
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
"""

SPARK_EXECUTOR = """
apiVersion: v1
kind: Pod
metadata:
  name: spark-executor-{i}
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

PYTORCH_WORKER = """
apiVersion: v1
kind: Pod
metadata:
  name: distributed-training-{i}
  labels:
    pod-group.scheduling.kubenexus.io/name: "training-job"
    pod-group.scheduling.kubenexus.io/min-available: "8"
spec:
  schedulerName: topos
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

SELECTOR = "pod-group.scheduling.kubenexus.io/name"


async def test_spark_driver_and_ten_executors_start_together(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        await cluster.create(SPARK_DRIVER)
        for i in range(9):
            await cluster.create(SPARK_EXECUTOR.format(i=i))
        # 10 of 11: nothing starts, and every pod says what it waits for.
        message = await cluster.condition("spark-driver", "10 of 11 pods exist")
        assert message.startswith("waiting for pod group spark-job-123: 0/11 members placed")
        assert all(v is None for v in (await cluster.placement(SELECTOR)).values())
        await cluster.create(SPARK_EXECUTOR.format(i=9))
        placed = await cluster.all_bound(f"{SELECTOR}=spark-job-123", 11)
        assert "spark-driver" in placed


async def test_pytorch_eight_workers_share_one_node_and_its_nvswitch(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for i in range(8):
            await cluster.create(yaml.safe_load(PYTORCH_WORKER.format(i=i)))
        placed = await cluster.all_bound(f"{SELECTOR}=training-job", 8)
        # 8 × 1 GPU fits on one 8-GPU node: a gang goes to the narrowest domain, one node.
        assert len(set(placed.values())) == 1
        gpus = set()
        for name in placed:
            pod = await cluster.pod(name)
            gpus.add(pod["metadata"]["annotations"]["topos.io/assigned-gpus"])
        assert len(gpus) == 8  # each worker its own GPU
