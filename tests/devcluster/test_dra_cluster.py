"""NVIDIA's DRA objects on the real control plane, used by Kubernetes' own components.

The API server accepts the DeviceClasses and ResourceSlices ``devcluster.dra`` publishes; the
real kube-scheduler allocates claims from them (so they are valid input for DRA, not only for
Topos); kube-controller-manager creates a pod's claim from its template and releases it when
the pod finishes; a Job makes its pods.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.devices import discover_profile
from common.kube import NODES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, KubeClient, Resource
from devcluster.dra import (
    DEVICE_CLASSES,
    DRIVER,
    GPU_CLASS,
    DraPublishError,
    node_slices,
    publish_node,
)
from devcluster.kube_wait import wait_for_object, wait_for_pods
from tests.support.dra import (
    EXTENDED_CLAIM,
    allocated,
    claim,
    claim_gone,
    claim_pod,
    claim_template,
    devices,
    dra_node,
    pod_claim,
    reserved_for,
)
from tests.support.gpu_cluster import GpuCluster

JOBS = Resource("batch", "v1", "jobs", namespaced=True, kind="Job")
RUN = "topos-dra/run"


@pytest.fixture
def run() -> str:
    return uuid.uuid4().hex[:8]


async def test_published_slices_are_accepted_with_the_agents_uuids(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    nodes = {unique_name("a100"): "dgx-a100", unique_name("mig"): "dgx-a100-mig"}
    for node, profile in nodes.items():
        stored = await dra_node(kube, node, profile)
        assert stored["spec"]["driver"] == DRIVER
        assert stored["spec"]["pool"]["name"] == node
        agent = discover_profile(profile, hostname=node)
        uuids = {d["attributes"]["uuid"]["string"] for d in stored["spec"]["devices"]}
        if profile == "dgx-a100":
            assert uuids == {g.uuid for g in agent.gpus}
        else:
            assert uuids == {m.uuid for g in agent.gpus for m in g.mig_instances}
    gpu_class = await kube.get(DEVICE_CLASSES, GPU_CLASS)
    assert gpu_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"


async def test_republishing_replaces_the_slice_with_a_newer_pool_generation(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("pcie")
    first = await dra_node(kube, node, "pcie-8x")
    second = await publish_node(kube, node, "pcie-8x")
    assert second["spec"]["pool"]["generation"] == first["spec"]["pool"]["generation"] + 1
    assert [s["metadata"]["name"] for s in await node_slices(kube, node)] == [
        second["metadata"]["name"]
    ]


async def test_publishing_for_a_missing_node_or_profile_says_which(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    with pytest.raises(DraPublishError, match="does not exist"):
        await publish_node(kube, unique_name("ghost"), "dgx-a100")
    node = unique_name("real")
    await dra_node(kube, node, "dgx-a100")
    with pytest.raises(DraPublishError, match="no-such-box"):
        await publish_node(kube, node, "no-such-box")


async def test_kube_scheduler_allocates_a_template_claim_and_it_is_released_when_the_pod_ends(
    kube: KubeClient, namespace: str, kube_scheduler_name: str, run: str
) -> None:
    node = f"dra-a100-{run}"
    await dra_node(kube, node, "dgx-a100", labels={RUN: run})
    await kube.create(RESOURCE_CLAIM_TEMPLATES, claim_template("two", 2), namespace=namespace)
    pod = claim_pod(
        "train", template="two", scheduler=kube_scheduler_name, node_selector={RUN: run}
    )
    await kube.create(PODS, pod, namespace=namespace)

    made = await pod_claim(
        kube, namespace, "train", lambda c: allocated(c) and bool(reserved_for(c)), what="allocated"
    )
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Pod", "train")  # the controller-manager made it
    chosen = devices(made)
    assert len(chosen) == 2
    assert {(driver, pool) for driver, pool, _ in chosen} == {(DRIVER, node)}
    assert reserved_for(made) == ["train"]
    bound = await wait_for_object(
        kube, PODS, "train", lambda p: bool(p["spec"].get("nodeName")), namespace=namespace
    )
    assert bound["spec"]["nodeName"] == node

    # No kubelet: the test says the pod finished. The claim controller unreserves the claim and
    # deletes it (it made it for this pod).
    await kube.patch(
        PODS, "train", {"status": {"phase": "Succeeded"}}, namespace=namespace, subresource="status"
    )
    await claim_gone(kube, namespace, made["metadata"]["name"])


async def test_kube_scheduler_serves_an_unchanged_nvidia_gpu_pod_through_the_class(
    kube: KubeClient, namespace: str, kube_scheduler_name: str, run: str
) -> None:
    """KEP-5004: the gpu.nvidia.com class names nvidia.com/gpu, the node has no such capacity,
    so kube-scheduler creates the pod's claim itself and allocates 4 GPUs in it."""
    node = f"dra-pcie-{run}"
    await dra_node(kube, node, "pcie-8x", labels={RUN: run})
    pod = claim_pod("plain", gpus=4, scheduler=kube_scheduler_name, node_selector={RUN: run})
    await kube.create(PODS, pod, namespace=namespace)
    made = await pod_claim(kube, namespace, "plain", allocated, what="the extended-resource claim")
    assert made["metadata"]["annotations"][EXTENDED_CLAIM] == "true"
    assert len(devices(made)) == 4


async def test_a_claim_of_too_many_gpus_leaves_the_pod_pending_with_kubes_reason(
    kube: KubeClient, namespace: str, kube_scheduler_name: str, run: str
) -> None:
    node = f"dra-v100-{run}"
    await dra_node(kube, node, "dgx1-v100", labels={RUN: run})
    await kube.create(RESOURCE_CLAIMS, claim("sixteen", 16), namespace=namespace)
    pod = claim_pod(
        "greedy", claim_name="sixteen", scheduler=kube_scheduler_name, node_selector={RUN: run}
    )
    await kube.create(PODS, pod, namespace=namespace)
    pending = await wait_for_object(
        kube,
        PODS,
        "greedy",
        lambda p: any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            for c in (p.get("status") or {}).get("conditions") or ()
        ),
        namespace=namespace,
    )
    assert not pending["spec"].get("nodeName")
    assert not allocated(await kube.get(RESOURCE_CLAIMS, "sixteen", namespace=namespace))


async def test_a_job_makes_its_pod_and_takes_it_along_when_deleted(
    kube: KubeClient, namespace: str
) -> None:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"}}
    made = await kube.create(JOBS, {**job, "spec": {"template": template}}, namespace=namespace)

    pods = await wait_for_pods(
        kube, namespace, lambda ps: list(ps) or None, label_selector="job-name=once"
    )
    assert pods[0]["metadata"]["ownerReferences"][0]["uid"] == made["metadata"]["uid"]
    await kube.delete(JOBS, "once", namespace=namespace, propagation_policy="Background")
    await wait_for_pods(
        kube, namespace, lambda ps: True if not ps else None, label_selector="job-name=once"
    )


async def test_a_topos_test_clusters_dra_node_joins_the_inventory_by_uuid(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    """``GpuCluster.add_node(dra=True)``: the node the coordinator's inventory knows (its
    topology) and the node's slice name the same GPUs, device ``gpu-<i>`` ↔ GPU ``i``."""
    cluster = GpuCluster(kube, kubeconfig, namespace)
    node = await cluster.add_node("dgx", "dgx-a100", dra=True)
    (stored,) = await node_slices(kube, node)
    by_name = {d["name"]: d["attributes"]["uuid"]["string"] for d in stored["spec"]["devices"]}
    assert by_name == {f"gpu-{g.index}": g.uuid for g in cluster.topologies[node].gpus}
    allocatable = (await kube.get(NODES, node))["status"]["allocatable"]
    assert "nvidia.com/gpu" not in allocatable


async def test_a_users_claim_is_unreserved_and_deallocated_when_its_pod_ends_but_kept(
    kube: KubeClient, namespace: str, kube_scheduler_name: str, run: str
) -> None:
    """A claim the user made (not from a template) outlives its pod: the controller-manager only
    takes the finished pod out of ``reservedFor`` and drops the allocation, so the devices are
    free again and the claim can be used by the next pod."""
    node = f"dra-h100-{run}"
    await dra_node(kube, node, "dgx-h100", labels={RUN: run})
    await kube.create(RESOURCE_CLAIMS, claim("mine", 2), namespace=namespace)
    pod = claim_pod(
        "first", claim_name="mine", scheduler=kube_scheduler_name, node_selector={RUN: run}
    )
    await kube.create(PODS, pod, namespace=namespace)
    await wait_for_object(
        kube, RESOURCE_CLAIMS, "mine", lambda c: reserved_for(c) == ["first"], namespace=namespace
    )
    await kube.patch(
        PODS, "first", {"status": {"phase": "Succeeded"}}, namespace=namespace, subresource="status"
    )
    released = await wait_for_object(
        kube,
        RESOURCE_CLAIMS,
        "mine",
        lambda c: not reserved_for(c) and not allocated(c),
        namespace=namespace,
        what="claim mine unreserved and deallocated",
    )
    assert released["metadata"]["name"] == "mine"
