"""Seed 001 (Kubernetes-native scheduling for LLM serving) as its objects are written — the
Deployments, the PriorityClass and the pod specs of its concept sections — applied on the real
control plane, where kube-controller-manager's ReplicaSet controller makes the replicas. Only
``schedulerName`` differs from the seed, plus what the API server refuses without: a Deployment's
selector and matching template labels (the app label the zone example's anti-affinity already
names), a container with an image where the seed shows none.

Fleet, labelled as the guide's labelling step would (GPU product, type, zone, instance type):
``h100-a`` (zone us-west-1a) and ``h100-b`` (us-west-1b), DGX H100 on p5.48xlarge; ``a100-40``
and ``a100-80`` in us-west-1c on p4d.24xlarge; ``dedicated``, an H100 in us-west-1a tainted
``gpu-only=true:NoSchedule``. The guide's co-location example (model server next to a redis cache)
and its combined example are applied as pods by ``tests/e2e/test_e2e_user_scheduling.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.gang_cluster import Controllers, GangCluster
from tests.support.gpu_cluster import assignment, gpu_indices
from tests.support.workloads import apply, apply_all, pods_of, scale

ZONE = "topology.kubernetes.io/zone"
FLEET = (
    # short name, profile, product, zone, instance type, taints
    ("h100-a", "dgx-h100", "H100", "us-west-1a", "p5.48xlarge", ()),
    ("h100-b", "dgx-h100", "H100", "us-west-1b", "p5.48xlarge", ()),
    ("a100-40", "dgx-a100", "A100-40GB", "us-west-1c", "p4d.24xlarge", ()),
    ("a100-80", "dgx-a100", "A100-80GB", "us-west-1c", "p4d.24xlarge", ()),
    (
        "dedicated",
        "dgx-h100",
        "H100",
        "us-west-1a",
        "p5.48xlarge",
        ({"key": "gpu-only", "value": "true", "effect": "NoSchedule"},),
    ),
)


@pytest.fixture
async def cluster(kube: Any, kubeconfig: Any, namespace: str) -> GangCluster:
    cluster = GangCluster(kube, kubeconfig, namespace)
    for short, profile, product, zone, instance, taints in FLEET:
        await cluster.add_node(
            short,
            profile,
            gfd=False,
            labels_extra={
                "nvidia.com/gpu.product": product,
                "gpu-type": product,
                "zone": zone,
                ZONE: zone,
                "node.kubernetes.io/instance-type": instance,
            },
            taints=taints,
        )
    return cluster


def node(cluster: GangCluster, short: str) -> str:
    return f"{short}-{cluster.run}"


H100_ONLY = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: llama-3-70b-h100
spec:
  replicas: 2
  selector:
    matchLabels: {app: llama-3-70b-h100}
  template:
    metadata:
      labels: {app: llama-3-70b-h100}
    spec:
      schedulerName: topos
      nodeSelector:
        nvidia.com/gpu.product: H100
      containers:
      - name: vllm
        image: vllm/vllm-openai:latest
        resources:
          limits:
            nvidia.com/gpu: "4"
"""


async def test_h100_deployment_replicas_get_four_gpus_of_one_numa_node_on_h100s(
    cluster: GangCluster,
) -> None:
    async with cluster.gang_coordinator():
        await apply(cluster, H100_ONLY)
        placed = await cluster.all_bound("app=llama-3-70b-h100", 2)
        pods = await cluster.pods("app=llama-3-70b-h100")
    # Untainted H100 nodes only: never an A100, never the dedicated node.
    assert set(placed.values()) <= {node(cluster, "h100-a"), node(cluster, "h100-b")}, placed
    held: set[tuple[str, str]] = set()
    for pod in pods:
        where, gpus, numa = assignment(pod)
        topo = cluster.topologies[where]
        assert (len(gpus), len(numa)) == (4, 1), pod["metadata"]["annotations"]
        assert {topo.gpus[i].numa_node for i in gpu_indices(topo, gpus)} == set(numa)
        assert not held & {(where, g) for g in gpus}, "a GPU was assigned twice"
        held |= {(where, g) for g in gpus}


MULTI_ZONE = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: llama-3-70b-multi-zone
spec:
  replicas: 3
  selector:
    matchLabels: {app: llama-3-70b-multi-zone}
  template:
    metadata:
      labels: {app: llama-3-70b-multi-zone}
    spec:
      schedulerName: topos
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - topologyKey: topology.kubernetes.io/zone
            labelSelector:
              matchExpressions:
              - key: app
                operator: In
                values: [llama-3-70b-multi-zone]
      containers:
      - name: vllm
        image: vllm/vllm-openai:latest
"""


async def test_multi_zone_deployment_puts_one_replica_per_zone_and_explains_a_fourth(
    cluster: GangCluster,
) -> None:
    zone_of = {node(cluster, short): zone for short, _, _, zone, _, _ in FLEET}
    async with cluster.gang_coordinator():
        await apply(cluster, MULTI_ZONE)
        placed = await cluster.all_bound("app=llama-3-70b-multi-zone", 3)
        await scale(cluster, "llama-3-70b-multi-zone", 4)
        pods = await pods_of(cluster, "app=llama-3-70b-multi-zone", 4)
        (extra,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in placed]
        message = await cluster.unschedulable(extra)
    assert sorted(zone_of[n] for n in placed.values()) == [
        "us-west-1a",
        "us-west-1b",
        "us-west-1c",
    ]
    # Every zone holds a replica already; the dedicated node's taint is not tolerated.
    assert message == (
        "0/5 nodes are available: 1 node(s) had untolerated taint(s), "
        "4 node(s) didn't match pod anti-affinity rules."
    )


# The concept sections' pod specs, each on a pod of its own.
NODE_SELECTOR = """
apiVersion: v1
kind: Pod
metadata:
  name: selected
spec:
  schedulerName: topos
  nodeSelector:
    gpu-type: "H100"
    zone: "us-west-1a"
  containers:
  - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "1"}}}
"""
NODE_AFFINITY = """
apiVersion: v1
kind: Pod
metadata:
  name: affine
spec:
  schedulerName: topos
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: nvidia.com/gpu.product
            operator: In
            values: ["H100", "A100-80GB"]
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        preference:
          matchExpressions:
          - key: node.kubernetes.io/instance-type
            operator: In
            values: ["p4d.24xlarge"]
  containers:
  - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "1"}}}
"""


async def test_node_selector_and_node_affinity_pick_the_nodes_they_name(
    cluster: GangCluster,
) -> None:
    async with cluster.gang_coordinator():
        await apply_all(cluster, NODE_SELECTOR + "---" + NODE_AFFINITY)
        selected = await cluster.bound("selected")
        affine = await cluster.bound("affine")
    # H100 in us-west-1a: h100-a (the dedicated node is in that zone too, but tainted).
    assert selected["spec"]["nodeName"] == node(cluster, "h100-a")
    # H100 or A100-80GB required, p4d preferred: the A100-80GB node, not the p4d A100-40GB.
    assert affine["spec"]["nodeName"] == node(cluster, "a100-80")


MODEL_SERVER = """
apiVersion: v1
kind: Pod
metadata:
  name: model-server
  labels: {app: model-server}
spec:
  schedulerName: topos
  nodeSelector: {gpu-type: H100}
  containers:
  - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "2"}}}
"""
TERM = """
      - labelSelector:
          matchExpressions:
          - key: app
            operator: In
            values: ["model-server"]
        topologyKey: kubernetes.io/hostname
"""
NEIGHBOURS = f"""
apiVersion: v1
kind: Pod
metadata:
  name: colocated
spec:
  schedulerName: topos
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:{TERM}
  containers:
  - {{name: main, image: busybox, resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: spread
spec:
  schedulerName: topos
  nodeSelector: {{gpu-type: H100}}
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:{TERM}
  containers:
  - {{name: main, image: busybox, resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}
"""


async def test_pod_affinity_joins_the_model_server_and_anti_affinity_avoids_it(
    cluster: GangCluster,
) -> None:
    async with cluster.gang_coordinator():
        await apply(cluster, MODEL_SERVER)
        server = (await cluster.bound("model-server"))["spec"]["nodeName"]
        await apply_all(cluster, NEIGHBOURS)
        colocated = await cluster.bound("colocated")
        spread = await cluster.bound("spread")
    assert colocated["spec"]["nodeName"] == server
    assert spread["spec"]["nodeName"] != server
    # The spread pod asked for an H100 too: the other untainted one.
    assert spread["spec"]["nodeName"] in {node(cluster, "h100-a"), node(cluster, "h100-b")}


TOLERATING = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  schedulerName: topos
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  {tolerations}
  containers:
  - {{name: main, image: busybox, resources: {{limits: {{nvidia.com/gpu: "8"}}}}}}
"""
GPU_ONLY = """tolerations:
  - key: "gpu-only"
    operator: "Equal"
    value: "true"
    effect: "NoSchedule\""""


async def test_the_dedicated_node_takes_only_pods_tolerating_gpu_only(cluster: GangCluster) -> None:
    dedicated = node(cluster, "dedicated")
    async with cluster.gang_coordinator():
        await apply(cluster, TOLERATING.format(name="intruder", node=dedicated, tolerations=""))
        await apply(cluster, TOLERATING.format(name="owner", node=dedicated, tolerations=GPU_ONLY))
        owner = await cluster.bound("owner")
        message = await cluster.unschedulable("intruder")
    assert owner["spec"]["nodeName"] == dedicated
    assert "1 node(s) had untolerated taint(s)" in message


PRIORITY_CLASS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high-priority-model
value: 1000
globalDefault: false
"""
FILLER = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: filler
spec:
  replicas: 1
  selector:
    matchLabels: {app: filler}
  template:
    metadata:
      labels: {app: filler}
    spec:
      schedulerName: topos
      nodeSelector: {gpu-type: A100-80GB}
      containers:
      - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "8"}}}
"""
URGENT = """
apiVersion: v1
kind: Pod
metadata:
  name: urgent
spec:
  schedulerName: topos
  priorityClassName: high-priority-model
  nodeSelector: {gpu-type: A100-80GB}
  containers:
  - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "8"}}}
"""


async def test_a_high_priority_model_takes_the_node_of_a_preemptible_replica(
    cluster: GangCluster,
) -> None:
    await apply(cluster, PRIORITY_CLASS)
    a100_80 = node(cluster, "a100-80")
    async with Controllers(cluster), cluster.gang_coordinator():
        await apply(cluster, FILLER)
        (victim,) = await cluster.all_bound("app=filler", 1)
        urgent = await apply(cluster, URGENT)
        assert urgent["spec"]["priority"] == 1000  # resolved by the API server's admission
        placed = await cluster.bound("urgent")
        # The ReplicaSet makes the evicted replica again; it has nowhere to go now.
        pods = await pods_of(cluster, "app=filler", 1)
        (replacement,) = [p["metadata"]["name"] for p in pods]
        message = await cluster.unschedulable(replacement)
    assert placed["spec"]["nodeName"] == a100_80
    assert replacement != victim
    assert "Insufficient nvidia.com/gpu" in message
