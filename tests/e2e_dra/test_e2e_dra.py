"""DRA end to end on the real control plane: a real ``topos coordinator``, agents on the fake
NVML, slices as NVIDIA's driver publishes them, kube-controller-manager creating claims from
templates and releasing claims of pods that are gone.

Covered: a pod naming a claim and a pod using a template get claims allocated with the NVLink
set Topos chose (the pod's ``topos.io/assigned-gpus`` names the same GPUs), protected and
reserved for the pod, and are bound (the template pod is not tried before its claim exists: no
FailedScheduling); an unchanged ``nvidia.com/gpu`` pod gets a claim created
for it (KEP-5004); a deleted pod's claim is released by kube-controller-manager and its GPUs
serve the next pod; a pod whose claim a killed coordinator had already allocated for it is only
bound by the next one; a claim naming a missing DeviceClass is explained on its pod and harms no
other pod; a gang's members are bound with every member's claim written, across nodes when
their claims do not fit one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.kube import EVENTS, PODS, RESOURCE_CLAIMS, KubeClient
from coordinator.adapters.kube.writer import KubeClusterWriter
from coordinator.core.dra.model import ClaimAllocation, DeviceId, DeviceResult
from coordinator.engine.ports import PodRef
from devcluster.dra import DRIVER
from devcluster.kube_wait import scheduled_message, wait_for_event, wait_for_object
from devcluster.pods import pod
from tests.e2e_dra.conftest import DraFleet, dra_fleet, start_fleet
from tests.support.dra import (
    PROTECTION,
    claim,
    claim_pod,
    claim_template,
    devices,
    gpu_indices,
    reserved_uids,
)

pytestmark = pytest.mark.kube

QUADS = ([0, 1, 2, 3], [4, 5, 6, 7])  # the DGX-1's all-NVLink quads


def assigned(fleet: DraFleet, obj: dict[str, Any]) -> list[int]:
    """The GPUs the pod's ``topos.io/assigned-gpus`` names, as indices on its node."""
    topology = fleet.topologies[obj["spec"]["nodeName"]]
    uuids = obj["metadata"]["annotations"]["topos.io/assigned-gpus"].split(",")
    by_uuid = {g.uuid: g.index for g in topology.gpus}
    return sorted(by_uuid[u] for u in uuids)


def check_written_for(fleet: DraFleet, claim: dict[str, Any], obj: dict[str, Any]) -> list[int]:
    """The claim is protected, reserved for the pod and names the GPUs the pod was given."""
    node = obj["spec"]["nodeName"]
    assert PROTECTION in claim["metadata"]["finalizers"]
    assert reserved_uids(claim) == [obj["metadata"]["uid"]]
    assert {pool for _, pool, _ in devices(claim)} == {node}
    selector = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    assert selector["matchFields"][0]["values"] == [node]
    gpus = gpu_indices(claim)
    assert gpus == assigned(fleet, obj)
    return gpus


async def test_claims_get_the_nvlink_set_and_are_reserved_before_the_bind(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(kube, kubeconfig, namespace, directory) as fleet:
        cls = fleet.class_name
        await fleet.create(claim("pair", 2, device_class=cls))
        await fleet.create(claim_pod("first", claim_name="pair", scheduler="topos"))
        first = await fleet.bound("first")
        pair = await fleet.claim("pair")
        pair_gpus = check_written_for(fleet, pair, first)

        # From a template: kube-controller-manager creates the claim, Topos allocates it.
        await fleet.create(claim_template("quad", 4, device_class=cls))
        await fleet.create(claim_pod("second", template="quad", scheduler="topos"))
        second = await fleet.bound("second")
        # Not tried before its claim existed (kube-scheduler's PreEnqueue): no FailedScheduling.
        await wait_for_event(kube, namespace, reason="Scheduled", name="second")
        listed = await kube.list(
            EVENTS, namespace=namespace, field_selector="involvedObject.name=second"
        )
        assert [e["reason"] for e in listed["items"]] == ["Scheduled"]
        (status,) = second["status"]["resourceClaimStatuses"]
        quad = await fleet.claim(status["resourceClaimName"])
        quad_gpus = check_written_for(fleet, quad, second)

        assert quad_gpus in QUADS
        assert not set(quad_gpus) & set(pair_gpus)
        topology = fleet.topologies[second["spec"]["nodeName"]]
        assert all(topology.link(a, b).is_nvlink for a in quad_gpus for b in quad_gpus if a != b)


async def test_an_unchanged_gpu_pod_gets_a_claim_made_for_it(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(kube, kubeconfig, namespace, directory, extended=True) as fleet:
        await fleet.create(pod("plain", gpus=4, scheduler="topos"))
        obj = await fleet.bound("plain")
        status = obj["status"]["extendedResourceClaimStatus"]
        claim = await fleet.claim(status["resourceClaimName"])

        meta = claim["metadata"]
        assert meta["name"].startswith("plain-extended-resources-")
        assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "Pod",
            obj["metadata"]["uid"],
            True,
        )
        assert [m["resourceName"] for m in status["requestMappings"]] == ["nvidia.com/gpu"]
        assert check_written_for(fleet, claim, obj) in QUADS


async def test_a_deleted_pods_claim_is_released_and_serves_the_next_pod(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(kube, kubeconfig, namespace, directory) as fleet:
        cls = fleet.class_name
        await fleet.create(claim("all", 8, device_class=cls))
        await fleet.create(claim_pod("holder", claim_name="all", scheduler="topos"))
        await fleet.bound("holder")
        await fleet.claim("all")
        await fleet.create(claim("next", 8, device_class=cls))
        await fleet.create(claim_pod("waiter", claim_name="next", scheduler="topos"))
        await wait_for_object(  # every GPU is taken: the waiter is explained, not bound
            kube,
            PODS,
            "waiter",
            lambda p: scheduled_message(p, status="False") is not None,
            namespace=namespace,
            what="waiter explained",
        )

        await kube.delete(PODS, "holder", namespace=namespace, grace_period_seconds=0)
        released = await fleet.claim("all", lambda c: not (c.get("status") or {}).get("allocation"))
        assert not reserved_uids(released)
        waiter = await fleet.bound("waiter")
        nxt = await fleet.claim("next")
        assert check_written_for(fleet, nxt, waiter) == list(range(8))


async def test_a_claim_allocated_before_a_coordinator_died_is_only_bound(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(kube, kubeconfig, namespace, directory, start=False) as fleet:
        node = fleet.nodes[0].name
        kept = await fleet.create(claim("kept", 2, device_class=fleet.class_name))
        obj = await fleet.create(claim_pod("again", claim_name="kept", scheduler="topos"))
        # What a coordinator killed between the claim write and the bind left behind.
        meta = kept["metadata"]
        written = ClaimAllocation(
            namespace,
            "kept",
            meta["uid"],
            meta["resourceVersion"],
            node,
            results=tuple(DeviceResult("gpus", DeviceId(DRIVER, node, f"gpu-{i}")) for i in (6, 7)),
        )
        await KubeClusterWriter(kube).allocate_claims(PodRef.of(obj), [written])
        before = await kube.get(RESOURCE_CLAIMS, "kept", namespace=namespace)

        await start_fleet(fleet)
        bound = await fleet.bound("again")

        assert bound["spec"]["nodeName"] == node
        after = await kube.get(RESOURCE_CLAIMS, "kept", namespace=namespace)
        assert after["status"] == before["status"]  # nothing written again, nothing lost
        assert gpu_indices(after) == [6, 7]
        assert assigned(fleet, bound) == [6, 7]  # the pod names the GPUs its claim holds


async def test_a_claim_naming_a_missing_class_is_explained_and_harms_no_other_pod(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(kube, kubeconfig, namespace, directory) as fleet:
        await fleet.create(claim("typo", 2, device_class="gpu.nvidia.cmo"))
        await fleet.create(claim("fine", 2, device_class=fleet.class_name))
        await fleet.create(claim_pod("broken", claim_name="typo", scheduler="topos"))
        await fleet.create(claim_pod("healthy", claim_name="fine", scheduler="topos"))

        await fleet.bound("healthy")
        explained = await wait_for_object(
            kube,
            PODS,
            "broken",
            lambda p: scheduled_message(p, status="False") is not None,
            namespace=namespace,
            what="broken explained",
        )
        assert "gpu.nvidia.cmo" in str(scheduled_message(explained, status="False"))
        assert not explained["spec"].get("nodeName")
        typo = await kube.get(RESOURCE_CLAIMS, "typo", namespace=namespace)
        assert not (typo.get("status") or {}).get("allocation")


async def gang_of_quads(fleet: DraFleet, members: int) -> set[tuple[str, tuple[int, ...]]]:
    """``members`` pods in one gang, each with a 4-GPU claim: each bound with its claim written
    for it; the (node, quad) each got."""
    for i in range(members):
        await fleet.create(claim(f"w{i}-gpus", 4, device_class=fleet.class_name))
    for i in range(members):
        member = claim_pod(
            f"w{i}", claim_name=f"w{i}-gpus", scheduler="topos", gang=("train", members)
        )
        await fleet.create(member)
    quads = set()
    for i in range(members):
        obj = await fleet.bound(f"w{i}")
        member_claim = await fleet.claim(f"w{i}-gpus")
        gpus = check_written_for(fleet, member_claim, obj)
        assert gpus in QUADS
        quads.add((obj["spec"]["nodeName"], tuple(gpus)))
    return quads


async def test_a_gang_binds_once_every_members_claim_is_written(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    async with dra_fleet(kube, kubeconfig, namespace, directory) as fleet:
        assert len(await gang_of_quads(fleet, 2)) == 2  # both quads of the one node


async def test_a_gang_larger_than_a_node_spreads_by_its_claims(
    kube: KubeClient, kubeconfig: Path, namespace: str, directory: Path
) -> None:
    # The gang's placement must count the GPUs its claims ask for: three 4-GPU claims do not
    # fit one DGX-1, so the gang spans both nodes.
    async with dra_fleet(kube, kubeconfig, namespace, directory, count=2) as fleet:
        quads = await gang_of_quads(fleet, 3)
        assert len(quads) == 3
        assert len({node for node, _ in quads}) == 2
