"""The claim writes before a Binding, on the real API server: a decided ClaimAllocation becomes
the claim's delete-protection finalizer, ``status.allocation`` and ``status.reservedFor``; a claim
changed since the decision is a conflict and is left as it was; an allocated claim only gains the
pod in ``reservedFor``; a KEP-5004 claim is created for the pod, owned by it and named in its
status; releasing undoes each of these."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, cast

import pytest

from common.kube import PODS, RESOURCE_CLAIMS, KubeClient, NotFound
from coordinator.adapters.kube.claims import KubeClaimWriter
from coordinator.adapters.kube.writer import KubeClusterWriter
from coordinator.core.dra.model import ClaimAllocation, DeviceId, DeviceResult
from coordinator.engine.ports import BindConflict, PodRef
from devcluster import pods
from devcluster.dra import DRIVER
from tests.support import dra
from tests.support.dra import PROTECTION, claim_allocation

pytestmark = pytest.mark.kube

SHARING = ({"opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}}},)


def decided(claim: dict[str, Any], node: str, *devices: str) -> ClaimAllocation:
    return claim_allocation(claim, node, *devices, config=SHARING)


async def make_pod(kube: KubeClient, namespace: str, name: str, *, gpus: int = 0) -> PodRef:
    obj = await kube.create(PODS, pods.pod(name, namespace=None, gpus=gpus), namespace=namespace)
    return PodRef.of(obj)


async def read(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return await kube.get(RESOURCE_CLAIMS, name, namespace=namespace)


async def test_an_allocation_is_protected_allocated_and_reserved(
    kube: KubeClient, namespace: str
) -> None:
    writer = KubeClusterWriter(kube)
    pod = await make_pod(kube, namespace, "train")
    claim = await kube.create(RESOURCE_CLAIMS, dra.claim("train-gpus", 2), namespace=namespace)

    written = await writer.allocate_claims(pod, [decided(claim, "gpu-1", "gpu-0", "gpu-1")])

    assert [c.name for c in written] == ["train-gpus"]
    after = await read(kube, namespace, "train-gpus")
    assert PROTECTION in after["metadata"]["finalizers"]
    allocation = after["status"]["allocation"]
    assert [
        (r["request"], r["driver"], r["pool"], r["device"])
        for r in allocation["devices"]["results"]
    ] == [("gpus", DRIVER, "gpu-1", "gpu-0"), ("gpus", DRIVER, "gpu-1", "gpu-1")]
    assert allocation["devices"]["config"] == [
        {
            "source": "FromClass",
            "opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}},
        }
    ]
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
        ]
    }
    assert after["status"]["reservedFor"] == [{"resource": "pods", "name": "train", "uid": pod.uid}]

    # The bind did not happen: the pod leaves it, the claim is free and unprotected again.
    await writer.release_claims(pod, written)
    released = await read(kube, namespace, "train-gpus")
    assert not released.get("status", {}).get("allocation")
    assert not released.get("status", {}).get("reservedFor")
    assert PROTECTION not in (released["metadata"].get("finalizers") or [])


async def test_a_claim_changed_since_the_decision_is_a_conflict_and_left_alone(
    kube: KubeClient, namespace: str
) -> None:
    writer = KubeClusterWriter(kube)
    pod = await make_pod(kube, namespace, "late")
    claim = await kube.create(RESOURCE_CLAIMS, dra.claim("late-gpus", 2), namespace=namespace)
    decision = decided(claim, "gpu-1", "gpu-2", "gpu-3")
    # Someone (another scheduler) allocates it first.
    other = decided(claim, "gpu-2", "gpu-0", "gpu-1")
    rival = await make_pod(kube, namespace, "rival")
    await KubeClusterWriter(kube).allocate_claims(rival, [other])

    with pytest.raises(BindConflict):
        await writer.allocate_claims(pod, [decision])

    after = await read(kube, namespace, "late-gpus")
    results = after["status"]["allocation"]["devices"]["results"]
    assert [r["pool"] for r in results] == ["gpu-2", "gpu-2"]  # never double-allocated
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [rival.uid]


class _ChangedAfterProtect:
    """A client through which the claim changes (a label, by someone else) right after the
    writer's finalizer write returns, before its allocation write."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)

    async def patch(self, resource: Any, name: str, patch: Any, **kw: Any) -> Any:
        reply = await self._kube.patch(resource, name, patch, **kw)
        if kw.get("patch_type") == "json":  # the finalizer write
            label = {"metadata": {"labels": {"changed": "meanwhile"}}}
            await self._kube.patch(resource, name, label, namespace=kw["namespace"])
        return reply


async def test_a_claim_changed_between_its_two_writes_is_a_conflict_and_left_free(
    kube: KubeClient, namespace: str
) -> None:
    """The allocation write is made on the claim as the finalizer write returned it, with that
    version as precondition: a change in between is a conflict, the finalizer is taken off
    again and the other writer's change kept."""
    writer = KubeClaimWriter(cast(KubeClient, _ChangedAfterProtect(kube)))
    pod = await make_pod(kube, namespace, "racing")
    claim = await kube.create(RESOURCE_CLAIMS, dra.claim("racing-gpus", 1), namespace=namespace)

    with pytest.raises(BindConflict):
        await writer.allocate(pod, [decided(claim, "gpu-1", "gpu-0")])

    after = await read(kube, namespace, "racing-gpus")
    assert not after.get("status", {}).get("allocation")
    assert not after.get("status", {}).get("reservedFor")
    assert PROTECTION not in (after["metadata"].get("finalizers") or [])
    assert after["metadata"]["labels"] == {"changed": "meanwhile"}


async def test_the_allocation_write_leaves_the_spec_as_stored(
    kube: KubeClient, namespace: str
) -> None:
    """Opaque driver config written with its keys out of order (as NVIDIA's ComputeDomain
    channel claims are) stays byte for byte what the user wrote: the status write sends the
    whole claim back, and the server keeps its stored spec and metadata."""
    body = dra.claim("opaque-gpus", 1)
    parameters = {"zeta": 1, "alpha": {"b": 2, "a": 1}, "kind": "ChannelConfig"}
    body["spec"]["devices"]["config"] = [
        {"requests": ["gpus"], "opaque": {"driver": DRIVER, "parameters": parameters}}
    ]
    body["metadata"]["labels"] = {"team": "a"}
    claim = await kube.create(RESOURCE_CLAIMS, body, namespace=namespace)
    pod = await make_pod(kube, namespace, "opaque")

    await KubeClusterWriter(kube).allocate_claims(pod, [decided(claim, "gpu-1", "gpu-2")])

    after = await read(kube, namespace, "opaque-gpus")
    assert after["spec"] == claim["spec"]
    stored = after["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert list(stored) == ["zeta", "alpha", "kind"]
    assert after["metadata"]["labels"] == {"team": "a"}
    assert after["metadata"]["finalizers"] == [PROTECTION]
    assert dra.devices(after) == [(DRIVER, "gpu-1", "gpu-2")]
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [pod.uid]


async def test_known_finalizers_are_kept_and_a_stale_knowledge_is_a_conflict(
    kube: KubeClient, namespace: str
) -> None:
    """The decision knows the claim had no finalizers (the watched object), so the writer sets
    the list in one request; the version pin makes that safe: a finalizer added since is a
    conflict, and is kept."""
    writer = KubeClusterWriter(kube)
    pod = await make_pod(kube, namespace, "quick")
    claim = await kube.create(RESOURCE_CLAIMS, dra.claim("quick-gpus", 1), namespace=namespace)
    known_empty = dataclasses.replace(decided(claim, "gpu-1", "gpu-0"), finalizers=())
    await writer.allocate_claims(pod, [known_empty])
    after = await read(kube, namespace, "quick-gpus")
    assert after["metadata"]["finalizers"] == [PROTECTION]
    assert after["status"]["reservedFor"][0]["uid"] == pod.uid

    late = await kube.create(RESOURCE_CLAIMS, dra.claim("kept-gpus", 1), namespace=namespace)
    stale = dataclasses.replace(decided(late, "gpu-1", "gpu-1"), finalizers=())
    await kube.patch(
        RESOURCE_CLAIMS,
        "kept-gpus",
        {"metadata": {"finalizers": ["example.com/keep"]}},
        namespace=namespace,
    )
    with pytest.raises(BindConflict):
        await writer.allocate_claims(pod, [stale])
    kept = await read(kube, namespace, "kept-gpus")
    assert kept["metadata"]["finalizers"] == ["example.com/keep"]
    assert not kept.get("status", {}).get("allocation")
    await kube.patch(
        RESOURCE_CLAIMS, "kept-gpus", {"metadata": {"finalizers": None}}, namespace=namespace
    )


async def test_a_failed_claim_undoes_the_claims_written_before_it(
    kube: KubeClient, namespace: str
) -> None:
    writer = KubeClusterWriter(kube)
    pod = await make_pod(kube, namespace, "two")
    first = await kube.create(RESOURCE_CLAIMS, dra.claim("two-a", 2), namespace=namespace)
    second = await kube.create(RESOURCE_CLAIMS, dra.claim("two-b", 2), namespace=namespace)
    stale = decided(second, "gpu-1", "gpu-2", "gpu-3")
    await kube.patch(
        RESOURCE_CLAIMS, "two-b", {"metadata": {"labels": {"x": "y"}}}, namespace=namespace
    )

    with pytest.raises(BindConflict):
        await writer.allocate_claims(pod, [decided(first, "gpu-1", "gpu-0", "gpu-1"), stale])

    for name in ("two-a", "two-b"):
        after = await read(kube, namespace, name)
        assert not after.get("status", {}).get("allocation"), name
        assert PROTECTION not in (after["metadata"].get("finalizers") or []), name


async def test_an_allocated_claim_only_gains_the_pod_in_reserved_for(
    kube: KubeClient, namespace: str
) -> None:
    writer = KubeClusterWriter(kube)
    first = await make_pod(kube, namespace, "first")
    second = await make_pod(kube, namespace, "second")
    claim = await kube.create(RESOURCE_CLAIMS, dra.claim("shared", 2), namespace=namespace)
    await writer.allocate_claims(first, [decided(claim, "gpu-1", "gpu-0", "gpu-1")])
    now = await read(kube, namespace, "shared")
    meta = now["metadata"]
    share = ClaimAllocation(
        namespace, "shared", meta["uid"], meta["resourceVersion"], "gpu-1", results=()
    )

    written = await writer.allocate_claims(second, [share])

    after = await read(kube, namespace, "shared")
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [first.uid, second.uid]
    assert after["status"]["allocation"] == now["status"]["allocation"]

    await writer.release_claims(second, written)  # leaves the first pod's allocation alone
    after = await read(kube, namespace, "shared")
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [first.uid]
    assert after["status"]["allocation"] == now["status"]["allocation"]


async def test_an_extended_resource_claim_is_created_for_the_pod(
    kube: KubeClient, namespace: str
) -> None:
    writer = KubeClusterWriter(kube)
    pod = await make_pod(kube, namespace, "plain", gpus=2)
    spec = dra.claim("unused", 2)["spec"]
    want = ClaimAllocation(
        namespace,
        "",
        "",
        "",
        "gpu-1",
        results=tuple(
            DeviceResult("container-0-request-0", DeviceId(DRIVER, "gpu-1", d))
            for d in ("gpu-4", "gpu-5")
        ),
        spec=spec
        | {
            "devices": {
                "requests": [
                    {
                        "name": "container-0-request-0",
                        "exactly": {"deviceClassName": DRIVER, "count": 2},
                    }
                ]
            }
        },
        extended_requests=(("main", "nvidia.com/gpu", "container-0-request-0"),),
    )

    (written,) = await writer.allocate_claims(pod, [want])

    assert written.name.startswith("plain-extended-resources-")
    claim = await read(kube, namespace, written.name)
    meta = claim["metadata"]
    assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "plain",
        pod.uid,
        True,
    )
    assert PROTECTION in meta["finalizers"]
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == [
        "gpu-4",
        "gpu-5",
    ]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod.uid]
    obj = await kube.get(PODS, "plain", namespace=namespace)
    assert obj["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [
            {
                "containerName": "main",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-0",
            }
        ],
        "resourceClaimName": written.name,
    }

    await writer.release_claims(pod, [written])  # the bind did not happen: the claim goes
    with pytest.raises(NotFound):
        await read(kube, namespace, written.name)


async def test_a_pod_sharing_a_claim_being_allocated_waits_for_that_write(
    kube: KubeClient, namespace: str
) -> None:
    """Pods sharing one claim, decided one after the other before any write landed: the later
    ones (the core found the claim allocated in flight: ``reserve_only`` with its devices) wait
    for the first's write and join ``reservedFor`` in turn — no conflict, no pod decided again.
    A pod decided on devices the claim does not hold is a conflict that leaves it alone; one
    joining after someone else changed the claim reads it again."""
    writer = KubeClusterWriter(kube)
    pods_ = [await make_pod(kube, namespace, n) for n in ("a", "b", "c", "d", "e")]
    claim = await kube.create(RESOURCE_CLAIMS, dra.claim("shared", 2), namespace=namespace)
    allocating = decided(claim, "gpu-1", "gpu-0", "gpu-1")
    joining = dataclasses.replace(allocating, reserve_only=True)

    await asyncio.gather(
        writer.allocate_claims(pods_[0], [allocating]),
        writer.allocate_claims(pods_[1], [joining]),
        writer.allocate_claims(pods_[2], [joining]),
    )

    after = await read(kube, namespace, "shared")
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [p.uid for p in pods_[:3]]
    assert [r["device"] for r in after["status"]["allocation"]["devices"]["results"]] == [
        "gpu-0",
        "gpu-1",
    ]
    elsewhere = dataclasses.replace(decided(claim, "gpu-1", "gpu-2", "gpu-3"), reserve_only=True)
    with pytest.raises(BindConflict, match="holds other devices"):
        await writer.allocate_claims(pods_[3], [elsewhere])
    assert await read(kube, namespace, "shared") == after
    await kube.patch(
        RESOURCE_CLAIMS, "shared", {"metadata": {"labels": {"x": "y"}}}, namespace=namespace
    )
    await writer.allocate_claims(pods_[4], [joining])
    final = await read(kube, namespace, "shared")
    assert [r["uid"] for r in final["status"]["reservedFor"]] == [
        *(p.uid for p in pods_[:3]),
        pods_[4].uid,
    ]
    assert final["metadata"]["labels"] == {"x": "y"}
