"""The scheduler runtime over the in-memory cluster (the demo's backend), the queue on a fake
clock, and the explain/simulate API: what a user notices — which pods get placed, in which order,
when a waiting pod is retried, that a GPU is never handed out twice while binds are in flight,
that a bad pod is named and harms no one, and that a what-if changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.api.explain import ROUTES, SCHEDULER, SchedulerSlot
from coordinator.app.web import build_app
from coordinator.core.queue import QueueSettings, SchedulingQueue
from coordinator.engine.loop import RuntimeSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.clock import ManualClock

# --- the queue ----------------------------------------------------------------------------------


def test_queue_pops_by_priority_then_age_and_backs_off_failures() -> None:
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1, max_backoff_s=4), clock=clock)
    q.add(pod("old-low", gpus=1, uid="uid-old-low", created="2026-01-01T00:00:00Z"))
    q.add(pod("new-low", gpus=1, uid="uid-new-low", created="2026-01-02T00:00:00Z"))
    q.add(pod("urgent", gpus=1, uid="uid-urgent", priority=1000, created="2026-01-03T00:00:00Z"))
    order = []
    while (entry := q.pop()) is not None:
        order.append(entry.key)
        q.retry(entry)
    assert order == ["default/urgent", "default/old-low", "default/new-low"]
    assert q.pop() is None  # all backing off
    assert q.next_ready_in() == pytest.approx(1.0)
    clock.now += 1.0
    assert q.pop() is not None


def test_unschedulable_pods_wait_for_a_cluster_change_and_bad_pods_for_an_edit() -> None:
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(unschedulable_flush_s=60), clock=clock)
    q.add(pod("big", gpus=8, uid="uid-big"))
    q.add(pod("bad", gpus=1, uid="uid-bad", annotations={"topos.io/gpu-locality": "telepathy"}))
    big, bad = q.pop(), q.pop()
    assert big is not None
    assert bad is not None
    q.failed(big, message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    q.failed(bad, message="invalid", spec_error=True)
    clock.now += 30
    assert q.pop() is None  # nothing changed
    assert q.cluster_changed() == 1  # only the pod a cluster change can help
    clock.now += 30
    again = q.pop()
    assert again is not None
    assert again.key == "default/big"
    assert q.pop() is None
    # An edit that does not touch labels/annotations/spec (a status write) changes nothing…
    q.add(
        {
            **pod("bad", gpus=1, uid="uid-bad", annotations={"topos.io/gpu-locality": "telepathy"}),
            "status": {},
        }
    )
    assert q.pop() is None
    # …fixing the annotation does.
    q.add(pod("bad", gpus=1, uid="uid-bad", annotations={"topos.io/gpu-locality": "nvlink"}))
    clock.now += 10
    fixed = q.pop()
    assert fixed is not None
    assert fixed.key == "default/bad"


# --- the runtime over the memory cluster ----------------------------------------------------------


@pytest.fixture
async def memory() -> AsyncIterator[tuple[MemoryCluster, SchedulerRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name in ("h100-0", "h100-1"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    async with runtime:
        yield cluster, runtime


def assigned(cluster: MemoryCluster, name: str) -> tuple[str | None, list[str]]:
    pod = cluster.pod("default", name)
    assert pod is not None
    ann = pod["metadata"].get("annotations") or {}
    return pod["spec"].get("nodeName"), [
        g for g in ann.get("topos.io/assigned-gpus", "").split(",") if g
    ]


async def test_pipelined_binds_never_hand_out_a_gpu_twice(
    memory: tuple[MemoryCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    for i in range(20):
        cluster.create_pod(pod(f"p{i}", gpus=1))
    await runtime.settle()
    placed = [assigned(cluster, f"p{i}") for i in range(20)]
    bound = [(node, gpus[0]) for node, gpus in placed if node]
    assert len(bound) == 16
    assert len(set(bound)) == 16
    assert runtime.scheduler.stats.unschedulable >= 4


async def test_a_waiting_pod_is_placed_when_capacity_frees_up(
    memory: tuple[MemoryCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    cluster.create_pod(pod("a", gpus=8))
    cluster.create_pod(pod("b", gpus=8))
    await runtime.settle()
    cluster.create_pod(pod("c", gpus=4))
    await runtime.settle()
    assert assigned(cluster, "c")[0] is None
    failed = [e for e in cluster.events("default", "c") if e["reason"] == "FailedScheduling"]
    assert failed[0]["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    node_a, _ = assigned(cluster, "a")
    cluster.finish_pod("default", "a")
    await asyncio.wait_for(_until_bound(cluster, "c"), 60)
    await runtime.settle()  # the Scheduled Event is written after the bind, in the background
    assert assigned(cluster, "c")[0] == node_a
    scheduled = [e for e in cluster.events("default", "c") if e["reason"] == "Scheduled"]
    assert scheduled[0]["message"].startswith(f"Successfully assigned default/c to {node_a} (GPUs")


async def _until_bound(cluster: MemoryCluster, name: str) -> None:
    bound = asyncio.Event()

    def on_pod(kind: str, obj: Any) -> None:
        if obj["metadata"]["name"] == name and obj["spec"].get("nodeName"):
            bound.set()

    unsubscribe = cluster.subscribe(on_pod)
    try:
        if assigned(cluster, name)[0] is None:
            await bound.wait()
    finally:
        unsubscribe()


async def test_a_bad_pod_is_named_harms_no_one_and_is_placed_once_fixed(
    memory: tuple[MemoryCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    cluster.create_pod(pod("bad", gpus=2, annotations={"topos.io/gpu-locality": "telepathy"}))
    cluster.create_pod(pod("good", gpus=2))
    await runtime.settle()
    assert assigned(cluster, "good")[0] is not None
    assert assigned(cluster, "bad")[0] is None
    (event,) = [e for e in cluster.events("default", "bad") if e["reason"] == "FailedScheduling"]
    assert "metadata.annotations[topos.io/gpu-locality]" in event["message"]
    assert "'telepathy'" in event["message"]
    cluster.update_pod_metadata("default", "bad", annotations={"topos.io/gpu-locality": "nvlink"})
    await asyncio.wait_for(_until_bound(cluster, "bad"), 60)


async def test_a_deleted_pending_pod_is_never_bound(
    memory: tuple[MemoryCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    cluster.create_pod(pod("fill-0", gpus=8))
    cluster.create_pod(pod("fill-1", gpus=8))
    cluster.create_pod(pod("gone", gpus=1))
    await runtime.settle()
    cluster.delete_pod("default", "gone")
    cluster.finish_pod("default", "fill-0")
    await runtime.settle()
    assert cluster.pod("default", "gone") is None
    assert runtime.scheduler.queue.named("default/gone") is None
    assert cluster.binds == 2


# --- explain and simulate -----------------------------------------------------------------------


@pytest.fixture
async def api(
    memory: tuple[MemoryCluster, SchedulerRuntime],
) -> AsyncIterator[TestClient[Any, Any]]:
    cluster, runtime = memory
    app = build_app(cluster.inventory, extra_routes=ROUTES)
    app[SCHEDULER] = SchedulerSlot(runtime.scheduler)
    async with TestClient(TestServer(app)) as client:
        yield client


async def test_explain_shows_where_and_why_with_per_node_scores(
    memory: tuple[MemoryCluster, SchedulerRuntime], api: TestClient[Any, Any]
) -> None:
    cluster, runtime = memory
    cluster.create_pod(pod("placed", gpus=4, annotations={"topos.io/gpu-locality": "nvlink"}))
    cluster.create_pod(pod("huge", gpus=9))
    await runtime.settle()
    resp = await api.get("/v1/pods/default/placed/explain")
    assert resp.status == 200
    doc = await resp.json()
    assert doc["state"] == "bound"
    node, gpus = assigned(cluster, "placed")
    assert doc["node"] == node
    assert doc["gpus"] == gpus
    assert doc["nodes"][0]["node"] == node
    assert doc["nodes"][0]["feasible"] is True
    assert "GpuTopology" in doc["nodes"][0]["scores"]
    assert {n["node"] for n in doc["nodes"]} == {"h100-0", "h100-1"}
    resp = await api.get("/v1/pods/default/huge/explain")
    doc = await resp.json()
    assert doc["state"] == "unschedulable"
    assert doc["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert [n["reasons"] for n in doc["nodes"]] == [["Insufficient nvidia.com/gpu"]] * 2
    resp = await api.get("/v1/pods/default/nobody/explain")
    assert resp.status == 404
    assert (await resp.json())["error"] == "not-found"
    resp = await api.get("/v1/pods/default/placed/explain?limit=zero")
    assert resp.status == 400


async def test_older_decisions_explain_the_chosen_node_only_and_failures_keep_every_reason() -> (
    None
):
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name in ("h100-0", "h100-1"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster, settings=RuntimeSettings(explanations_detailed=1))
    async with runtime:
        app = build_app(cluster.inventory, extra_routes=ROUTES)
        app[SCHEDULER] = SchedulerSlot(runtime.scheduler)
        async with TestClient(TestServer(app)) as client:
            for name in ("first", "second"):
                cluster.create_pod(pod(name, gpus=4))
                await runtime.settle()
            cluster.create_pod(pod("huge", gpus=9))
            await runtime.settle()
            old = await (await client.get("/v1/pods/default/first/explain")).json()
            new = await (await client.get("/v1/pods/default/second/explain")).json()
            huge = await (await client.get("/v1/pods/default/huge/explain")).json()
    assert old["state"] == new["state"] == "bound"
    assert [n["node"] for n in old["nodes"]] == [assigned(cluster, "first")[0]]
    assert old["nodes"][0]["feasible"] is True
    assert old["nodes"][0]["score"] == old["score"]
    assert "GpuTopology" in old["nodes"][0]["scores"]
    assert (old["evaluated_nodes"], old["feasible_nodes"]) == (2, 2)
    assert {n["node"] for n in new["nodes"]} == {"h100-0", "h100-1"}
    assert [n["reasons"] for n in huge["nodes"]] == [["Insufficient nvidia.com/gpu"]] * 2


async def test_simulate_answers_where_pods_would_go_and_changes_nothing(
    memory: tuple[MemoryCluster, SchedulerRuntime], api: TestClient[Any, Any]
) -> None:
    cluster, runtime = memory
    generation = cluster.inventory.generation
    pods = [pod(f"what-if-{i}", gpus=8) for i in range(3)]
    resp = await api.post("/v1/simulate", json={"pods": pods})
    assert resp.status == 200
    doc = await resp.json()
    assert doc["nodes"] == 2
    assert doc["placed"] == 2
    placed_nodes = {r["node"] for r in doc["results"] if r["placed"]}
    assert placed_nodes == {"h100-0", "h100-1"}  # each sees the ones before it
    assert doc["results"][2]["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert cluster.inventory.generation == generation
    assert cluster.pods() == []
    assert runtime.scheduler.view.assumed_count == 0
    for body in (b"not json", b'{"pods": 3}', b"{}"):
        bad = await api.post("/v1/simulate", data=body)
        assert bad.status == 400
        assert (await bad.json())["error"] == "bad-request"


async def test_openapi_documents_explain_and_simulate(api: TestClient[Any, Any]) -> None:
    resp = await api.get("/v1/openapi.json")
    doc = await resp.json()
    assert "/v1/pods/{namespace}/{name}/explain" in doc["paths"]
    assert "post" in doc["paths"]["/v1/simulate"]
    assert "PodExplanation" in doc["components"]["schemas"]


async def test_api_without_a_running_scheduler_answers_503() -> None:
    app = build_app(Inventory(), extra_routes=ROUTES)
    app[SCHEDULER] = SchedulerSlot()
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/v1/simulate", json={"pods": []})
        assert resp.status == 503


async def test_pods_are_explained_only_once_the_agent_grace_is_over() -> None:
    """During the start-up grace a node without its agent may still gain a topology: the GPU pod
    that does not fit yet gets no FailedScheduling (an Event and a status patch per pending pod
    at every restart); when the grace ends it is tried again and explained."""
    inventory = Inventory(stale_ttl_s=3600, agent_grace_s=0.5)
    cluster = MemoryCluster(inventory)
    cluster.add_node("no-agent", allocatable={"nvidia.com/gpu": 8})
    runtime = memory_runtime(inventory, cluster)
    async with runtime:
        cluster.create_pod(pod("early", gpus=1))
        await runtime.settle()
        assert inventory.grace_left_s() > 0  # (guards the test's own timing)
        assert runtime.scheduler.stats.unschedulable >= 1
        assert not cluster.events("default", "early")
        async with asyncio.timeout(30):  # the grace ends: tried again (after its back-off)
            while not cluster.events("default", "early"):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        await runtime.settle()
    (event,) = cluster.events("default", "early")
    assert event["reason"] == "FailedScheduling"
    assert assigned(cluster, "early")[0] is None


async def test_a_gated_pod_keeps_the_api_servers_condition_and_gets_no_failure_event() -> None:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    cluster.add_node("dgx-a", topology=discover_profile("dgx-h100", hostname="dgx-a"))
    gated = pod("gated", gpus=1)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    cluster.create_pod(gated)
    cluster.create_pod(pod("huge", gpus=16))  # an ungated pod that fits nowhere is explained
    async with memory_runtime(inventory, cluster) as runtime:
        await runtime.settle()
        attempt = runtime.scheduler.last_attempt("default/gated")
        assert attempt is not None
        assert attempt.message == "waiting for scheduling gates: example.com/quota"
        obj = cluster.pod("default", "gated")
        assert obj is not None
        (condition,) = obj["status"]["conditions"]
        assert (condition["reason"], condition["message"]) == (
            "SchedulingGated",
            "Scheduling is blocked due to non-empty scheduling gates",
        )
        assert [e["reason"] for e in cluster.events(name="gated")] == []
        assert [e["reason"] for e in cluster.events(name="huge")] == ["FailedScheduling"]


async def test_replicas_behind_a_service_are_spread_over_the_nodes(
    memory: tuple[MemoryCluster, SchedulerRuntime],
) -> None:
    cluster, runtime = memory
    service = {"kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}}}
    cluster.apply_workload(service)
    for i in range(2):
        cluster.create_pod(pod(f"web-{i}", cpu=None, memory=None, labels={"app": "web"}))
    await runtime.settle()
    assert {assigned(cluster, f"web-{i}")[0] for i in range(2)} == {"h100-0", "h100-1"}
    with pytest.raises(ValueError, match="kind: 'Deployment' is not one of Service"):
        cluster.apply_workload({"kind": "Deployment", "metadata": {"name": "web"}})


async def test_an_unchanged_explanation_is_counted_on_the_event_not_written_again() -> None:
    """kube-scheduler writes ``PodScheduled=False`` only when its message changes and counts
    every attempt on the FailedScheduling Event; so does Topos (with no repost interval here,
    every attempt is counted)."""
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    cluster.add_node("dgx-a", topology=discover_profile("dgx-h100", hostname="dgx-a"))
    settings = RuntimeSettings(
        failure_repost_s=0.0, queue=QueueSettings(initial_backoff_s=0.0, max_backoff_s=0.0)
    )
    cluster.create_pod(pod("fill", gpus=8))
    async with memory_runtime(inventory, cluster, settings=settings) as runtime:
        await runtime.settle()
        cluster.create_pod(pod("wait", gpus=1))
        await runtime.settle()
        stats = runtime.scheduler.stats
        for _ in range(3):  # the cluster changed in a way that does not help it
            before = stats.unschedulable
            runtime.scheduler.changes.everything()
            async with asyncio.timeout(10):
                while stats.unschedulable == before:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            await runtime.settle()
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    failed = [e for e in cluster.events(name="wait") if e["reason"] == "FailedScheduling"]
    assert [e["message"] for e in failed] == [message] * 4  # every attempt counted
    assert cluster.status_writes["default/wait"] == 1  # the condition written once
