"""DRA claims in the scheduling loop, over the in-memory cluster: a decision's claims are
allocated and reserved for the pod before it is bound; a claim changed since the decision stops
the bind, holds nothing and the pod is tried again; a bind refused after the claims were written
gives them back; pods bound together (a gang) get all their claims written or none; the devices
decided count as taken until the claim watch shows them, and a pod whose claim is allocated and
reserved for it already (a restart between claim write and bind) is only bound."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.claims import PodClaim
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.queue import QueuedPod
from coordinator.core.snapshot.podinfo import Placement
from coordinator.engine.binder import BindJob
from coordinator.engine.claims import claims_to_write
from coordinator.engine.loop import Scheduler
from coordinator.engine.ports import BindConflict
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.dra import DRIVER
from devcluster.pods import pod
from tests.support import dra
from tests.support.dra import PROTECTION, claim_allocation


def decision(request: PodRequest, node: str, *claims: ClaimAllocation) -> Decision:
    return Decision(
        pod_key=request.key,
        node=node,
        placement=Placement(),
        device_ids=(),
        score=0.0,
        breakdown={},
        verdicts={},
        evaluated=1,
        feasible=1,
        claims=claims,
    )


@pytest.fixture
def cluster() -> MemoryCluster:
    cluster = MemoryCluster(Inventory())
    cluster.add_node("gpu-1")
    return cluster


@pytest.fixture
def runtime(cluster: MemoryCluster) -> SchedulerRuntime:
    return memory_runtime(cluster.inventory, cluster)


def popped(scheduler: Scheduler, name: str) -> QueuedPod:
    entry = scheduler.queue.pop()
    assert entry is not None
    assert entry.key == f"default/{name}"
    return entry


def decide(scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch, *claims: ClaimAllocation) -> None:
    """The core's DynamicResources plugin, played by hand: every decision carries ``claims``."""

    def schedule(request: Any, snapshot: Any, framework: Any) -> Decision:
        return decision(request, "gpu-1", *claims)

    monkeypatch.setattr(scheduler.nominations, "schedule", schedule)


def claim_of(cluster: MemoryCluster, name: str) -> dict[str, Any]:
    obj = cluster.dra.get("ResourceClaim", f"default/{name}")
    assert obj is not None
    return obj


async def test_claims_are_allocated_and_reserved_before_the_pod_is_bound(
    cluster: MemoryCluster, runtime: SchedulerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = runtime.scheduler
    claim = cluster.dra.put("ResourceClaim", dra.claim("train-gpus", 2, namespace="default"))
    created = cluster.create_pod(pod("train"))
    decide(scheduler, monkeypatch, claim_allocation(claim, "gpu-1", "gpu-0", "gpu-1"))
    seen: list[tuple[bool, bool]] = []
    bind = cluster.bind

    async def bind_watching(*args: Any) -> None:
        status = claim_of(cluster, "train-gpus").get("status") or {}
        seen.append((bool(status.get("allocation")), bool(status.get("reservedFor"))))
        await bind(*args)

    monkeypatch.setattr(cluster, "bind", bind_watching)

    await scheduler.schedule(popped(scheduler, "train"))
    assert scheduler.view.held_claims(created["metadata"]["uid"])  # taken from the decision on
    await scheduler.drain()

    assert seen == [(True, True)]  # allocated and reserved when the Binding was sent
    after = claim_of(cluster, "train-gpus")
    assert PROTECTION in after["metadata"]["finalizers"]
    assert [r["device"] for r in after["status"]["allocation"]["devices"]["results"]] == [
        "gpu-0",
        "gpu-1",
    ]
    assert after["status"]["reservedFor"] == [
        {"resource": "pods", "name": "train", "uid": created["metadata"]["uid"]}
    ]
    assert cluster.pod("default", "train")["spec"]["nodeName"] == "gpu-1"  # type: ignore[index]
    # The claim watch shows it allocated: the store counts it from now on, nothing is held.
    assert scheduler.view.claims_in_flight == 0


async def test_a_claim_changed_since_the_decision_stops_the_bind_and_holds_nothing(
    cluster: MemoryCluster, runtime: SchedulerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = runtime.scheduler
    claim = cluster.dra.put("ResourceClaim", dra.claim("late-gpus", 2, namespace="default"))
    created = cluster.create_pod(pod("late"))
    decide(scheduler, monkeypatch, claim_allocation(claim, "gpu-1", "gpu-0", "gpu-1"))
    # Another scheduler allocates it between our decision and our write.
    taken = {**claim, "status": {"allocation": {"devices": {"results": []}}}}
    cluster.dra.put("ResourceClaim", taken)

    await scheduler.schedule(popped(scheduler, "late"))
    await scheduler.drain()

    assert cluster.pod("default", "late")["spec"].get("nodeName") is None  # type: ignore[index]
    assert claim_of(cluster, "late-gpus")["status"] == taken["status"]  # never double-allocated
    assert scheduler.stats.bind_conflicts == 1
    assert scheduler.view.held(created["metadata"]["uid"]) is None
    assert scheduler.view.claims_in_flight == 0
    attempt = scheduler.last_attempt("default/late")
    assert attempt is not None
    assert attempt.outcome == "bind-failed"
    assert "late-gpus" in attempt.message


async def test_a_refused_bind_gives_the_claims_back(
    cluster: MemoryCluster, runtime: SchedulerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = runtime.scheduler
    claim = cluster.dra.put("ResourceClaim", dra.claim("lost-gpus", 2, namespace="default"))
    cluster.create_pod(pod("lost"))
    decide(scheduler, monkeypatch, claim_allocation(claim, "gpu-1", "gpu-0", "gpu-1"))

    async def refused(*args: Any) -> None:
        raise BindConflict("pod default/lost is already assigned to gpu-2")

    monkeypatch.setattr(cluster, "bind", refused)

    await scheduler.schedule(popped(scheduler, "lost"))
    await scheduler.drain()

    after = claim_of(cluster, "lost-gpus")
    assert not after["status"].get("allocation")
    assert not after["status"].get("reservedFor")
    assert PROTECTION not in after["metadata"]["finalizers"]
    assert scheduler.view.claims_in_flight == 0


def job_for(scheduler: Scheduler, entry: QueuedPod, claim: ClaimAllocation) -> BindJob:
    request = entry.request
    assert isinstance(request, PodRequest)
    chosen = decision(request, "gpu-1", claim)
    scheduler.view.assume(request, "gpu-1", chosen.placement, chosen.claims)
    return scheduler.bind_job(entry, request, chosen)


async def test_pods_bound_together_get_all_their_claims_written_or_none(
    cluster: MemoryCluster, runtime: SchedulerRuntime
) -> None:
    scheduler = runtime.scheduler
    a = cluster.dra.put("ResourceClaim", dra.claim("w0-gpus", 2, namespace="default"))
    b = cluster.dra.put("ResourceClaim", dra.claim("w1-gpus", 2, namespace="default"))
    cluster.create_pod(pod("w0"))
    cluster.create_pod(pod("w1"))
    entries = [popped(scheduler, "w0"), popped(scheduler, "w1")]
    jobs = [
        job_for(scheduler, entries[0], claim_allocation(a, "gpu-1", "gpu-0")),
        job_for(scheduler, entries[1], claim_allocation(b, "gpu-1", "gpu-1")),
    ]
    # w1's claim changes after the decision: neither member may keep anything.
    cluster.dra.put("ResourceClaim", {**b, "metadata": {**b["metadata"], "labels": {"x": "y"}}})

    assert await scheduler.binder.write_claims(jobs) is None

    for name in ("w0-gpus", "w1-gpus"):
        status = claim_of(cluster, name).get("status") or {}
        assert not status.get("allocation"), name
        assert not status.get("reservedFor"), name
    assert scheduler.view.assumed_count == 0
    assert scheduler.view.claims_in_flight == 0
    assert scheduler.stats.bind_conflicts == 2

    # Decided again on the current claims, both are written, then both bind.
    again = [
        job_for(
            scheduler, entry, claim_allocation(claim_of(cluster, f"{name}-gpus"), "gpu-1", device)
        )
        for entry, name, device in zip(entries, ("w0", "w1"), ("gpu-0", "gpu-1"), strict=True)
    ]
    written = await scheduler.binder.write_claims(again)
    assert written is not None
    for job in written:
        await scheduler.binder.submit(job)
    await scheduler.drain()
    for name in ("w0", "w1"):
        assert cluster.pod("default", name)["spec"]["nodeName"] == "gpu-1"  # type: ignore[index]
        assert claim_of(cluster, f"{name}-gpus")["status"]["reservedFor"][0]["name"] == name


def test_a_claim_already_allocated_and_reserved_for_the_pod_is_only_bound(
    cluster: MemoryCluster,
) -> None:
    claim = cluster.dra.put("ResourceClaim", dra.claim("mine", 2, namespace="default"))
    shared = cluster.dra.put("ResourceClaim", dra.claim("shared", 2, namespace="default"))
    created = cluster.create_pod(pod("again"))
    ref = {"resource": "pods", "name": "again", "uid": created["metadata"]["uid"]}
    other = {"resource": "pods", "name": "other", "uid": "uid-other"}
    done = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "gpu-1"}]}}
    cluster.dra.put(
        "ResourceClaim", {**claim, "status": {"allocation": done, "reservedFor": [ref]}}
    )
    shared = cluster.dra.put(
        "ResourceClaim", {**shared, "status": {"allocation": done, "reservedFor": [other]}}
    )
    request = parse_pod(created)
    assert isinstance(request, PodRequest)
    request = dataclasses.replace(
        request, claims=(PodClaim("a", claim_name="mine"), PodClaim("b", claim_name="shared"))
    )

    writes = claims_to_write(request, decision(request, "gpu-1"), cluster.dra.store)

    # "mine" was written by us before a restart: nothing to write. "shared" only gains the pod.
    assert [(c.name, c.results, c.resource_version) for c in writes] == [
        ("shared", (), shared["metadata"]["resourceVersion"])
    ]
