"""Malformed DRA objects, seen the way an operator sees them: ``topos_dra_rejected_objects``
counts what is left out by kind, the pod naming a malformed claim (or a claim of a malformed
DeviceClass) is told why, and nothing else is harmed; once fixed, the gauge drops and the pod
binds."""

from __future__ import annotations

from typing import Any

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.inventory.store import Inventory
from tests.support.dra import claim, claim_pod, gpu_class, memory_dra_node, node_slice
from tests.support.metrics_coordinator import MakeClient, Scrape, coordinator, scrape, settle
from tests.support.polling import eventually

NODE = "dgx1"
KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourcePool")


def dra_cluster() -> MemoryCluster:
    """One DGX-1 whose GPUs only DRA serves, its slice published, the GPU class defined."""
    cluster = MemoryCluster(Inventory())
    memory_dra_node(cluster, NODE, "dgx1-v100")
    cluster.dra.put("DeviceClass", gpu_class())
    return cluster


def rejected(s: Scrape) -> dict[str, float]:
    return {kind: s.value("topos_dra_rejected_objects", kind=kind) for kind in KINDS}


def bad_count(name: str) -> dict[str, Any]:
    obj = claim(name, 2)
    obj["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    return obj


async def explained(client: Any, name: str) -> str:
    reply = await client.get(f"/v1/pods/default/{name}/explain")
    assert reply.status == 200
    return str((await reply.json())["message"])


async def test_malformed_objects_are_counted_told_on_their_pods_and_harm_no_other(
    aiohttp_client: MakeClient,
) -> None:
    cluster = dra_cluster()
    broken_slice = node_slice(NODE, "dgx1-v100")
    broken_slice["metadata"]["name"] = "extra"
    broken_slice["spec"]["devices"][0]["attributes"]["uuid"] = {"string": 7}
    cluster.dra.put("ResourceSlice", broken_slice)
    broken_class = gpu_class()
    broken_class["metadata"]["name"] = "broken.example.com"
    broken_class["spec"]["selectors"] = [{"cel": {}}]
    cluster.dra.put("DeviceClass", broken_class)
    cluster.dra.put("ResourceClaim", bad_count("bad"))
    of_broken = claim("of-broken", 1, device_class="broken.example.com")
    cluster.dra.put("ResourceClaim", of_broken)
    cluster.dra.put("ResourceClaim", claim("fine", 2))
    client, app = await coordinator(aiohttp_client, cluster)
    cluster.create_pod(claim_pod("broken", claim_name="bad", scheduler="topos"))
    cluster.create_pod(claim_pod("classless", claim_name="of-broken", scheduler="topos"))
    cluster.create_pod(claim_pod("healthy", claim_name="fine", scheduler="topos"))
    await settle(app)

    s = await scrape(client)
    assert rejected(s) == {
        "ResourceSlice": 1,
        "DeviceClass": 1,
        "ResourceClaim": 1,
        "ResourcePool": 0,
    }
    assert cluster.pod("default", "healthy")["spec"]["nodeName"] == NODE  # type: ignore[index]
    assert (
        "resource claim bad is invalid: spec.devices.requests[0].exactly.count: must be an "
        "integer" in await explained(client, "broken")
    )
    assert "device class broken.example.com is invalid: spec.selectors[0].cel.expression" in (
        await explained(client, "classless")
    )

    cluster.dra.put("ResourceClaim", claim("bad", 2))  # fixed
    await settle(app)
    assert rejected(await scrape(client))["ResourceClaim"] == 0
    node = await eventually(  # after its backoff
        lambda: (cluster.pod("default", "broken") or {})["spec"].get("nodeName"),
        what="the pod of the fixed claim bound",
    )
    assert node == NODE
