"""What a gang's members are told while the gang forms, on the real control plane: never a
``PodScheduled=False`` after the bind, one ``FailedScheduling`` Event per member (its count going
up), and binds that do not wait behind those writes under the client's QPS limit."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import coordinator.engine.loop as engine_loop
from common.kube import EVENTS, ClientSettings, RateLimit
from coordinator.engine.gangs.service import GangSettings
from coordinator.engine.loop import RuntimeSettings
from tests.support.gang_cluster import GangCluster, gang_pod
from tests.support.polling import eventually

pytestmark = pytest.mark.usefixtures("podgroup_crd")


def pod_scheduled(pod: dict[str, Any]) -> tuple[str, str]:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return str(condition.get("status")), str(condition.get("message") or "")
    return "", ""


async def test_no_bound_member_is_left_saying_it_waits_for_its_group(
    cluster: GangCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race, made certain: one background write at a time and a slow client, so explanations
    # written while members arrive are still queued when the last member lets the gang bind.
    monkeypatch.setattr(engine_loop, "_MAX_BACKGROUND_WRITES", 1)
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)  # 24 GPUs: 4 gangs of 6
    limit = ClientSettings(rate_limit=RateLimit(qps=20, burst=1))
    async with cluster.gang_coordinator(client_settings=limit) as coord:
        for run in range(4):  # a fresh gang each time: the race four times over
            gang, size = f"g{run}", 6
            await asyncio.gather(
                *(
                    cluster.create(gang_pod(f"{gang}-{k}", gang, size, gpus=1, cpu="1"))
                    for k in range(size - 1)
                )
            )
            await cluster.condition(f"{gang}-0", f"waiting for pod group {gang}")
            await cluster.create(gang_pod(f"{gang}-{size - 1}", gang, size, gpus=1, cpu="1"))
            await cluster.all_bound(f"topos.io/gang={gang}", size)
            await coord.runtime.scheduler.drain()  # every explanation queued has landed
            pods = await cluster.pods(f"topos.io/gang={gang}")
            stale = {p["metadata"]["name"]: pod_scheduled(p) for p in pods}
            stale = {name: c for name, c in stale.items() if c[0] != "True"}
            assert stale == {}, f"run {run}: bound members say they are not scheduled"


async def test_a_forming_gang_posts_one_event_per_member_and_binds_ahead_of_them(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    size, qps = 12, 4.0
    # Every arrival explains every waiting member again (no repost interval, and members told
    # at once rather than once their siblings stop arriving): many writes.
    settings = RuntimeSettings(failure_repost_s=0.0)
    at_once = GangSettings(backoff_s=2.0, arrival_quiet_s=0.0)
    limit = ClientSettings(rate_limit=RateLimit(qps=qps, burst=1))
    async with cluster.gang_coordinator(
        settings=settings, client_settings=limit, gang_settings=at_once
    ) as coord:
        scheduler = coord.runtime.scheduler
        for k in range(6):  # one at a time, each seen waiting before the next
            await cluster.create(gang_pod(f"w-{k}", "train", size, gpus=1, cpu="1"))
            await cluster.condition(f"w-{k}", "waiting for pod group train")
        for k in range(6, size - 1):  # then quickly: explanations pile up behind the budget
            await cluster.create(gang_pod(f"w-{k}", "train", size, gpus=1, cpu="1"))
            await eventually(
                lambda k=k: scheduler.last_attempt(f"{cluster.namespace}/w-{k}"),
                what=f"w-{k} tried",
            )
        last = time.monotonic()
        await cluster.create(gang_pod(f"w-{size - 1}", "train", size, gpus=1, cpu="1"))
        await cluster.all_bound("topos.io/gang=train", size)
        took = time.monotonic() - last
        await scheduler.drain()
        events = (await cluster.kube.list(EVENTS, namespace=cluster.namespace))["items"]
    failed: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if event["reason"] == "FailedScheduling":
            failed.setdefault(event["involvedObject"]["name"], []).append(event)
    many = {name: len(found) for name, found in failed.items() if len(found) > 1}
    assert many == {}, "more than one FailedScheduling Event for a member"
    assert set(failed) <= {f"w-{k}" for k in range(size)}
    # the first member was told again at the arrivals after it: the same Event, counted
    assert failed["w-0"][0]["count"] > 1
    # size binds need size / qps seconds of the budget; the explanations queued ahead of them
    # need far more (before: the binds waited behind them, in arrival order)
    assert took < size / qps + 3.0, f"binding took {took:.1f}s after the last member arrived"
