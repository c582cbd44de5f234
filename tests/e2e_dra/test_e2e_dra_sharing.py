"""GPUs shared through DRA consumable capacity on the real control plane (KEP-5075, beta and on
by default in Kubernetes 1.36): a DGX H100 whose GPUs are published shareable (81559Mi of
``memory`` and 100 ``compute`` each), a real ``topos coordinator`` allocating claims that ask
``capacity.requests``.

Covered: two claims asking 20Gi share one GPU, each with its own ``shareID`` and its
``consumedCapacity`` as the API server stores it; a claim asking 50Gi, which no longer fits
there, gets another GPU; a claim carrying NVIDIA's TimeSlicing ``GpuConfig`` keeps it in its
allocation; the coordinator's ``/v1/nodes/{name}`` lists each GPU's shares (claim and what it
consumes), and so does ``kubectl topos dra-shares NODE``; requests no GPU can meet are
explained on their pods and allocate nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cli.kubectl_plugin import build_parser, run
from common.kube import PODS, RESOURCE_CLAIMS, KubeClient
from devcluster.dra import DRIVER
from devcluster.kube_wait import scheduled_message, wait_for_object
from tests.e2e_dra.conftest import DraFleet, dra_fleet
from tests.support.dra import claim_pod, reserved_uids

pytestmark = pytest.mark.kube

TIME_SLICING = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
}


def share_claim(
    name: str, device_class: str, *, config: dict[str, Any] | None = None, **capacity: str
) -> dict[str, Any]:
    """A claim for part of one GPU: ``capacity`` is its ``capacity.requests``."""
    exactly = {"deviceClassName": device_class, "capacity": {"requests": capacity}}
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if config is not None:
        devices["config"] = [
            {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": config}}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }


async def placed(fleet: DraFleet, name: str, **capacity: str) -> dict[str, Any]:
    """Claim ``name`` asking ``capacity``, a pod using it; the claim once the pod is bound."""
    await fleet.create(share_claim(name, fleet.class_name, **capacity))
    await fleet.create(claim_pod(name, claim_name=name, scheduler="topos"))
    obj = await fleet.bound(name)
    got = await fleet.claim(name)
    assert reserved_uids(got) == [obj["metadata"]["uid"]]
    return got


def result(claim: dict[str, Any]) -> dict[str, Any]:
    (only,) = claim["status"]["allocation"]["devices"]["results"]
    return dict(only)


async def test_claims_share_a_gpu_by_capacity_and_keep_their_sharing_config(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(
        kube, kubeconfig, namespace, directory, profile="dgx-h100", shared=True
    ) as fleet:
        a = result(await placed(fleet, "a", memory="20Gi"))
        b = result(await placed(fleet, "b", memory="20Gi"))
        assert a["device"] == b["device"]  # two shares of one GPU
        assert a["shareID"] != b["shareID"]
        assert a["consumedCapacity"] == {"memory": "20Gi", "compute": "10"}
        big = result(await placed(fleet, "big", memory="50Gi"))
        assert big["device"] != a["device"]  # 39.6Gi left there
        assert big["consumedCapacity"]["memory"] == "50Gi"

        await fleet.create(share_claim("ts", fleet.class_name, config=TIME_SLICING, memory="8Gi"))
        await fleet.create(claim_pod("ts", claim_name="ts", scheduler="topos"))
        await fleet.bound("ts")
        allocation = (await fleet.claim("ts"))["status"]["allocation"]
        (config,) = allocation["devices"]["config"]
        assert config["source"] == "FromClaim"
        assert config["opaque"] == {"driver": DRIVER, "parameters": TIME_SLICING}
        # best fit: the GPU the 50Gi share left fullest (29.6Gi) takes the 8Gi share
        assert allocation["devices"]["results"][0]["device"] == big["device"]

        node = fleet.nodes[0].name
        url = f"{fleet.coordinator.url}/v1/nodes/{node}"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            shares = (await resp.json())["dra_shares"]
        by_claim = {s["claim"].split("/")[1]: s for s in shares}
        assert sorted(by_claim) == ["a", "b", "big", "ts"]
        assert by_claim["a"]["device"] == f"{DRIVER}/{node}/{a['device']}"
        assert by_claim["a"]["gpu"] == by_claim["b"]["gpu"] != by_claim["big"]["gpu"]
        assert by_claim["ts"]["consumed"] == {"compute": "10", "memory": "8Gi"}
        assert by_claim["b"]["share_id"] == b["shareID"]

        args = ["--coordinator", fleet.coordinator.url, "dra-shares", node]
        table = (await run(build_parser().parse_args(args))).splitlines()
        assert table[0].split() == ["GPU", "DEVICE", "CLAIM", "CONSUMED"]
        row = next(line for line in table if line.split()[2] == f"{namespace}/ts")
        assert row.split()[1:] == [big["device"], f"{namespace}/ts", "compute=10", "memory=8Gi"]


async def test_capacity_requests_no_gpu_can_meet_are_explained(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(
        kube, kubeconfig, namespace, directory, profile="dgx-h100", shared=True
    ) as fleet:
        cls = fleet.class_name
        await fleet.create(share_claim("huge", cls, memory="100Gi"))
        await fleet.create(share_claim("greedy", cls, memory="1Gi", compute="150"))
        await fleet.create(claim_pod("huge", claim_name="huge", scheduler="topos"))
        await fleet.create(claim_pod("greedy", claim_name="greedy", scheduler="topos"))
        for name, why in (
            ("huge", "memory 100Gi is more than it has (81559Mi)"),
            ("greedy", "compute 150 is above the maximum 100"),
        ):
            explained = await wait_for_object(
                kube,
                PODS,
                name,
                lambda p: scheduled_message(p, status="False") is not None,
                namespace=namespace,
                what=f"{name} explained",
            )
            assert why in str(scheduled_message(explained, status="False"))
            assert not explained["spec"].get("nodeName")
            stored = await kube.get(RESOURCE_CLAIMS, name, namespace=namespace)
            assert not (stored.get("status") or {}).get("allocation")
