"""DRA end to end over the in-memory cluster (the scheduler, the core's allocator and the claim
writes together; no API server): pods with claims get the NVLink set Topos would choose, written
into the claim and reserved before the bind; an unchanged ``nvidia.com/gpu`` pod gets a claim
made for it where a DeviceClass serves that resource; a gang's claims are all written before its
members bind; a pod whose claim was allocated for it before a restart is only bound; a claim
naming a missing DeviceClass is explained on its pod and blocks nobody else; a pod whose claim
does not exist yet is not tried (no FailedScheduling) until it does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from common.model import NodeTopology
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.dra import (
    PROTECTION,
    allocated_on,
    claim,
    claim_pod,
    devices,
    gpu_class,
    gpu_indices,
    memory_dra_node,
    reserved_for,
    reserved_uids,
)

NODE = "dgx1"


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(Inventory())


@pytest.fixture
async def runtime(cluster: MemoryCluster) -> AsyncIterator[SchedulerRuntime]:
    runtime = memory_runtime(cluster.inventory, cluster)
    async with GangRuntime(runtime, settings=GangSettings(tick_s=0.05)), runtime:
        yield runtime


def claim_of(cluster: MemoryCluster, name: str) -> dict[str, Any]:
    obj = cluster.dra.get("ResourceClaim", f"default/{name}")
    assert obj is not None, f"no claim {name}"
    return obj


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("default", name)
    assert obj is not None
    return obj["spec"].get("nodeName")


def assigned_gpus(cluster: MemoryCluster, name: str, topology: NodeTopology) -> list[int]:
    obj = cluster.pod("default", name)
    assert obj is not None
    uuids = obj["metadata"]["annotations"]["topos.io/assigned-gpus"].split(",")
    by_uuid = {g.uuid: g.index for g in topology.gpus}
    return sorted(by_uuid[u] for u in uuids)


async def test_a_claim_gets_the_nvlink_set_and_is_reserved_before_the_bind(
    cluster: MemoryCluster, runtime: SchedulerRuntime
) -> None:
    topology = memory_dra_node(cluster, NODE, "dgx1-v100", plugin=False)
    cluster.dra.put("DeviceClass", gpu_class())
    cluster.dra.put("ResourceClaim", claim("pair", 2))
    cluster.dra.put("ResourceClaim", claim("quad", 4))
    first = cluster.create_pod(claim_pod("first", claim_name="pair", scheduler="topos"))
    await runtime.settle()
    second = cluster.create_pod(claim_pod("second", claim_name="quad", scheduler="topos"))
    await runtime.settle()

    pair, quad = claim_of(cluster, "pair"), claim_of(cluster, "quad")
    assert node_of(cluster, "first") == node_of(cluster, "second") == NODE
    assert reserved_uids(pair) == [first["metadata"]["uid"]]
    assert reserved_uids(quad) == [second["metadata"]["uid"]]
    assert PROTECTION in quad["metadata"]["finalizers"]
    # The devices written are the GPUs Topos chose (the pod's annotation names the same set)...
    quad_gpus = gpu_indices(quad)
    assert quad_gpus == assigned_gpus(cluster, "second", topology)
    assert {pool for _, pool, _ in devices(quad)} == {NODE}
    # ... an NVLink quad of the hybrid cube mesh, next to the pair, never overlapping it.
    assert quad_gpus in ([0, 1, 2, 3], [4, 5, 6, 7])
    assert not set(quad_gpus) & set(gpu_indices(pair))
    for a in quad_gpus:
        for b in quad_gpus:
            assert a == b or topology.link(a, b).is_nvlink


async def test_an_unchanged_gpu_pod_gets_a_claim_made_for_it(
    cluster: MemoryCluster, runtime: SchedulerRuntime
) -> None:
    topology = memory_dra_node(cluster, NODE, "dgx1-v100", plugin=False)
    cluster.dra.put("DeviceClass", gpu_class(extended=True))
    created = cluster.create_pod(pod("plain", gpus=4))
    await runtime.settle()

    assert node_of(cluster, "plain") == NODE
    obj = cluster.pod("default", "plain")
    assert obj is not None
    status = obj["status"]["extendedResourceClaimStatus"]
    made = claim_of(cluster, status["resourceClaimName"])
    meta = made["metadata"]
    assert meta["name"].startswith("plain-extended-resources-")
    assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert meta["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert reserved_uids(made) == [created["metadata"]["uid"]]
    gpus = gpu_indices(made)
    assert gpus == assigned_gpus(cluster, "plain", topology)
    assert gpus in ([0, 1, 2, 3], [4, 5, 6, 7])
    assert [m["resourceName"] for m in status["requestMappings"]] == ["nvidia.com/gpu"]


async def test_a_gangs_claims_are_all_written_and_its_members_bound(
    cluster: MemoryCluster, runtime: SchedulerRuntime
) -> None:
    memory_dra_node(cluster, NODE, "dgx1-v100", plugin=False)
    cluster.dra.put("DeviceClass", gpu_class())
    for i in range(2):
        cluster.dra.put("ResourceClaim", claim(f"w{i}-gpus", 4))
    for i in range(2):
        cluster.create_pod(
            claim_pod(f"w{i}", claim_name=f"w{i}-gpus", scheduler="topos", gang=("train", 2))
        )
    await runtime.settle()

    quads = []
    for i in range(2):
        assert node_of(cluster, f"w{i}") == NODE
        written = claim_of(cluster, f"w{i}-gpus")
        assert reserved_for(written) == [f"w{i}"]
        quads.append(gpu_indices(written))
    assert sorted(quads) == [[0, 1, 2, 3], [4, 5, 6, 7]]


async def test_a_claim_allocated_for_the_pod_before_a_restart_is_only_bound(
    cluster: MemoryCluster,
) -> None:
    memory_dra_node(cluster, NODE, "dgx1-v100", plugin=False)
    cluster.dra.put("DeviceClass", gpu_class())
    cluster.dra.put("ResourceClaim", claim("kept", 2))
    created = cluster.create_pod(claim_pod("again", claim_name="kept", scheduler="topos"))
    # A coordinator wrote the claim and was killed before the bind.
    mine = {"resource": "pods", "name": "again", "uid": created["metadata"]["uid"]}
    allocation = allocated_on(NODE, ["gpu-4", "gpu-5"])
    before = cluster.dra.put(
        "ResourceClaim",
        {**claim_of(cluster, "kept"), "status": {"allocation": allocation, "reservedFor": [mine]}},
    )
    runtime = memory_runtime(cluster.inventory, cluster)  # the restarted coordinator
    async with runtime:
        await runtime.settle()
        assert runtime.scheduler.view.claims_in_flight == 0  # the store counts it; none held

    assert node_of(cluster, "again") == NODE
    after = claim_of(cluster, "kept")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert gpu_indices(after) == [4, 5]


async def test_a_claim_naming_a_missing_class_is_explained_and_blocks_nobody(
    cluster: MemoryCluster, runtime: SchedulerRuntime
) -> None:
    memory_dra_node(cluster, NODE, "dgx1-v100", plugin=False)
    cluster.dra.put("DeviceClass", gpu_class())
    bad = claim("typo", 2)
    bad["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.cmo"
    cluster.dra.put("ResourceClaim", bad)
    cluster.dra.put("ResourceClaim", claim("fine", 2))
    cluster.create_pod(claim_pod("broken", claim_name="typo", scheduler="topos"))
    cluster.create_pod(claim_pod("healthy", claim_name="fine", scheduler="topos"))
    await runtime.settle()

    assert node_of(cluster, "broken") is None
    assert node_of(cluster, "healthy") == NODE
    assert not (claim_of(cluster, "typo").get("status") or {}).get("allocation")
    events = cluster.events("default", "broken")
    assert events
    assert "gpu.nvidia.cmo" in events[-1]["message"]


async def test_a_pod_whose_claim_is_not_created_yet_waits_unexplained_and_binds_once_it_is(
    cluster: MemoryCluster, runtime: SchedulerRuntime
) -> None:
    """kube-scheduler's PreEnqueue: a pod naming a ResourceClaim that does not exist yet is not
    tried (no FailedScheduling, no PodScheduled condition); it is tried when the claim appears."""
    memory_dra_node(cluster, NODE, "dgx1-v100", plugin=False)
    cluster.dra.put("DeviceClass", gpu_class())
    created = cluster.create_pod(claim_pod("early", claim_name="later", scheduler="topos"))
    await runtime.settle()

    assert node_of(cluster, "early") is None
    assert cluster.events("default", "early") == []
    obj = cluster.pod("default", "early")
    assert obj is not None
    assert not (obj.get("status") or {}).get("conditions")
    entry = runtime.scheduler.queue.entry(created["metadata"]["uid"])
    assert entry is not None
    assert entry.last_message == "waiting for resource claim later to be created"
    assert runtime.scheduler.stats.attempts == 0

    cluster.dra.put("ResourceClaim", claim("later", 2))
    await runtime.settle()
    assert node_of(cluster, "early") == NODE
    assert reserved_uids(claim_of(cluster, "later")) == [created["metadata"]["uid"]]
    assert [e["reason"] for e in cluster.events("default", "early")] == ["Scheduled"]
