"""End to end on the real control plane: the user-defined-scheduling guide's examples (seed 001)
scheduled by Topos exactly as kube-scheduler would, with GPUs chosen inside the node.

Fleet (agent labels from the profiles, plus what the guide's labelling step adds — GPU type,
zone, instance type): two DGX H100 in zones us-west-1a/1b, a DGX A100 in us-west-1c, and a DGX
H100 dedicated with the taint ``gpu-only=true:NoSchedule`` in us-west-1a.

Each Deployment replica is written here as the Pod its ReplicaSet would create (the template as
the guide gives it, ``schedulerName: topos``); tests/e2e_seeds applies the Deployments themselves,
through kube-controller-manager.
Covered: H100-only nodeSelector, spread across zones with required anti-affinity (and the replica
that can't fit, as ``kubectl describe`` shows it), co-location with a cache, dedicated tainted
nodes, priority classes, and the combined multi-dimension example.
"""

from __future__ import annotations

from pathlib import Path

from common.kube import KubeClient
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import GpuCluster, Kubectl, assignment, describe, gpu_indices

ZONE = "topology.kubernetes.io/zone"


async def fleet(kube: KubeClient, kubeconfig: Path, namespace: str) -> GpuCluster:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    for name, profile, product, zone, extra in (
        ("h100-a", "dgx-h100", "H100", "us-west-1a", {}),
        ("h100-b", "dgx-h100", "H100", "us-west-1b", {}),
        ("a100-c", "dgx-a100", "A100-40GB", "us-west-1c", {}),
    ):
        await cluster.add_node(
            name,
            profile,
            gfd=False,
            labels_extra={
                "nvidia.com/gpu.product": product,
                "gpu-type": product,
                "zone": zone,
                ZONE: zone,
                "node.kubernetes.io/instance-type": "p5.48xlarge"
                if product == "H100"
                else "p4d.24xlarge",
                **extra,
            },
        )
    await cluster.add_node(
        "dedicated",
        "dgx-h100",
        gfd=False,
        labels_extra={
            "nvidia.com/gpu.product": "H100",
            "gpu-type": "H100",
            "zone": "us-west-1a",
            ZONE: "us-west-1a",
        },
        taints=[{"key": "gpu-only", "value": "true", "effect": "NoSchedule"}],
    )
    return cluster


def node_of(cluster: GpuCluster, short: str) -> str:
    return f"{short}-{cluster.run}"


# Example 1 (H100 nodes only): the Deployment's pod template, two replicas.
H100_REPLICA = """
apiVersion: v1
kind: Pod
metadata:
  name: llama-3-70b-h100-{i}
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


async def test_h100_node_selector_gets_nvswitch_quads_on_one_numa_node(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    cluster = await fleet(kube, kubeconfig, namespace)
    async with cluster.coordinator():
        for i in range(2):
            await cluster.create(H100_REPLICA.format(i=i))
        pods = [await cluster.bound(f"llama-3-70b-h100-{i}") for i in range(2)]
        # Events are written after the bind, in the background: wait for the ones we describe.
        for i in range(2):
            await cluster.event("Scheduled", name=f"llama-3-70b-h100-{i}")
    seen: dict[str, set[str]] = {}
    for pod in pods:
        node, gpus, numa = assignment(pod)
        # Only untainted H100 nodes: never the A100, never the dedicated node.
        assert node in {node_of(cluster, "h100-a"), node_of(cluster, "h100-b")}
        assert len(gpus) == 4
        assert len(numa) == 1
        topo = cluster.topologies[node]
        indices = gpu_indices(topo, gpus)
        assert {topo.gpus[i].numa_node for i in indices} == set(numa)
        assert not seen.setdefault(node, set()) & set(gpus), "a GPU was assigned twice"
        seen[node] |= set(gpus)
        text = describe(kubectl, namespace, pod["metadata"]["name"])
        gpu_list = ",".join(str(i) for i in indices)
        assert "Scheduled" in text
        assert (
            f"Successfully assigned {namespace}/{pod['metadata']['name']} to {node} "
            f"(GPUs {gpu_list} NVSwitch; NUMA {numa[0]})"
        ) in text


# Example 2 (spread across zones): three replicas with required anti-affinity on the zone; a
# fourth replica has no zone left.
ZONE_REPLICA = """
apiVersion: v1
kind: Pod
metadata:
  name: llama-3-70b-multi-zone-{i}
  labels:
    app: llama-3-70b-multi-zone
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


async def test_zone_anti_affinity_spreads_and_explains_the_replica_that_cannot_fit(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    cluster = await fleet(kube, kubeconfig, namespace)
    async with cluster.coordinator():
        for i in range(3):
            await cluster.create(ZONE_REPLICA.format(i=i))
            await cluster.bound(f"llama-3-70b-multi-zone-{i}")
        await cluster.create(ZONE_REPLICA.format(i=3))
        message = await cluster.unschedulable("llama-3-70b-multi-zone-3")
        await cluster.warning("llama-3-70b-multi-zone-3")  # written after the condition
    zones = set()
    for i in range(3):
        node, _, _ = assignment(await cluster.pod(f"llama-3-70b-multi-zone-{i}"))
        zones.add(await kube_zone(kube, node))
    assert zones == {"us-west-1a", "us-west-1b", "us-west-1c"}
    # The dedicated node is tainted; the three others each hold a replica's zone. Wording as
    # the real kube-scheduler 1.33 gives it (tests/coordinator/core/
    # test_sched_vs_kube_scheduler.py checks the core against that binary).
    assert message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), "
        "3 node(s) didn't match pod anti-affinity rules."
    )
    text = describe(kubectl, namespace, "llama-3-70b-multi-zone-3")
    assert "FailedScheduling" in text
    assert message in text
    assert "topos" in text  # the Event's source


async def kube_zone(kube: KubeClient, node: str) -> str:
    from common.kube import NODES

    obj = await kube.get(NODES, node)
    return str(obj["metadata"]["labels"][ZONE])


# Example 3 (co-locate related pods): the model server must sit next to the cache.
MODEL_SERVER = """
apiVersion: v1
kind: Pod
metadata:
  name: model-server
spec:
  schedulerName: topos
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchExpressions:
          - key: app
            operator: In
            values: [redis-cache]
        topologyKey: kubernetes.io/hostname
  containers:
  - name: server
    image: vllm/vllm-openai:latest
    resources:
      limits:
        nvidia.com/gpu: "1"
"""
CACHE = """
apiVersion: v1
kind: Pod
metadata:
  name: redis-cache
  labels:
    app: redis-cache
spec:
  schedulerName: topos
  containers:
  - name: redis
    image: redis:7
"""


async def test_colocation_waits_for_the_cache_then_follows_it(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    cluster = await fleet(kube, kubeconfig, namespace)
    async with cluster.coordinator():
        await cluster.create(MODEL_SERVER)
        message = await cluster.unschedulable("model-server")
        assert "didn't match pod affinity rules" in message
        await cluster.warning("model-server")
        assert "FailedScheduling" in describe(kubectl, namespace, "model-server")
        await cluster.create(CACHE)
        cache = await cluster.bound("redis-cache")
        server = await cluster.bound("model-server")
    assert server["spec"]["nodeName"] == cache["spec"]["nodeName"]
    node, gpus, _ = assignment(server)
    assert len(gpus) == 1
    assert gpus[0] in {g.uuid for g in cluster.topologies[node].gpus}


# Taints and tolerations (dedicated nodes): the guide's toleration, on a pod that asks for the
# dedicated node by name.
TOLERATE_GPU_ONLY = {
    "key": "gpu-only",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}


async def test_dedicated_node_only_takes_pods_that_tolerate_its_taint(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    cluster = await fleet(kube, kubeconfig, namespace)
    dedicated = node_of(cluster, "dedicated")
    async with cluster.coordinator():
        on_it = {"kubernetes.io/hostname": dedicated}
        await cluster.create(gpu_pod("intruder", 2, node_selector=on_it))
        await cluster.create(
            gpu_pod("owner", 2, node_selector=on_it, tolerations=[TOLERATE_GPU_ONLY])
        )
        owner = await cluster.bound("owner")
        message = await cluster.unschedulable("intruder")
        await cluster.warning("intruder")
    assert owner["spec"]["nodeName"] == dedicated
    assert message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), "
        "3 node(s) didn't match Pod's node affinity/selector."
    )
    assert message in describe(kubectl, namespace, "intruder")


PRIORITY_CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high-priority-model-{run}
value: 1000
globalDefault: false
"""


async def test_priority_class_goes_first_for_the_last_free_node(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = await fleet(kube, kubeconfig, namespace)
    await cluster.create(PRIORITY_CLASSES.format(run=cluster.run))
    # Both wait before the coordinator starts; the older one has no priority.
    a100 = {"gpu-type": "A100-40GB"}
    await cluster.create(gpu_pod("batch", 8, node_selector=a100))
    urgent = await cluster.create(
        gpu_pod(
            "urgent", 8, node_selector=a100, priority_class=f"high-priority-model-{cluster.run}"
        )
    )
    assert urgent["spec"]["priority"] == 1000  # resolved by the API server's admission
    async with cluster.coordinator():
        placed = await cluster.bound("urgent")
        message = await cluster.unschedulable("batch")
    assert placed["spec"]["nodeName"] == node_of(cluster, "a100-c")
    assert "Insufficient nvidia.com/gpu" in message


# The combined example (multi-dimension scheduling), next to a monitoring pod on an H100.
MONITORING = """
apiVersion: v1
kind: Pod
metadata:
  name: prometheus
  labels:
    app: prometheus
spec:
  schedulerName: topos
  nodeSelector:
    gpu-type: H100
  containers:
  - name: prometheus
    image: prom/prometheus
"""
COMBINED = """
apiVersion: v1
kind: Pod
metadata:
  name: llm-model
  labels:
    app: model-serving
spec:
  schedulerName: topos
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: nvidia.com/gpu.product
            operator: In
            values: [H100]
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchExpressions:
          - key: app
            operator: In
            values: [prometheus]
        topologyKey: kubernetes.io/hostname
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          labelSelector:
            matchExpressions:
            - key: app
              operator: In
              values: [model-serving]
          topologyKey: kubernetes.io/hostname
  tolerations:
  - key: "nvidia.com/gpu"
    operator: "Exists"
    effect: "NoSchedule"
  priorityClassName: high-priority-gpu-{run}
  containers:
  - name: vllm
    image: vllm/vllm-openai:latest
    resources:
      limits:
        nvidia.com/gpu: "2"
"""


async def test_combined_llm_example_lands_next_to_monitoring_on_an_h100(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = await fleet(kube, kubeconfig, namespace)
    await cluster.create(
        PRIORITY_CLASSES.format(run=cluster.run).replace("high-priority-model", "high-priority-gpu")
    )
    async with cluster.coordinator():
        await cluster.create(MONITORING)
        monitor = await cluster.bound("prometheus")
        await cluster.create(COMBINED.format(run=cluster.run))
        model = await cluster.bound("llm-model")
    node, gpus, numa = assignment(model)
    assert node == monitor["spec"]["nodeName"]
    assert node in {node_of(cluster, "h100-a"), node_of(cluster, "h100-b")}
    assert model["spec"]["priority"] == 1000
    indices = gpu_indices(cluster.topologies[node], gpus)
    assert len(indices) == 2
    assert len(numa) == 1
