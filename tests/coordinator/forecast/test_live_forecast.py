"""The live forecast over a scheduler running on an in-memory cluster: a pending pod's predicted
start in ``/v1/pending`` and its ``PodScheduled`` message (written again only when the forecast
moves, at most once a minute), the runtime learned from a real pod's end, what-if's
predicted start with "wait for these pods" first, and the claims and volumes the copy carries
(a pod waiting for a claim to be made: "start unknown", with why)."""

from __future__ import annotations

import concurrent.futures
import datetime
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import pytest
from aiohttp.test_utils import TestClient

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.api import pending
from coordinator.api.explain import SCHEDULER, SchedulerSlot
from coordinator.app import forecast_worker
from coordinator.app.web import build_app
from coordinator.core.registry import build_profiles
from coordinator.engine.forecasts import Forecast, Forecasts
from coordinator.engine.ports import PodRef
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.whatif.service import WhatIf
from coordinator.forecast.live import LiveForecaster
from coordinator.forecast.runtimes import EXPECTED_DURATION
from coordinator.inventory.store import Inventory
from devcluster.pods import gpu_pod, pod
from tests.support.volumes import claim, csi_node, csi_volume, local_pv, storage_class

T0 = 1_800_000_000.0
P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class Clocks:
    mono: float = 1000.0
    wall: float = T0

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


@dataclass
class Live:
    client: TestClient
    cluster: MemoryCluster
    runtime: SchedulerRuntime
    forecaster: LiveForecaster
    forecasts: Forecasts
    clocks: Clocks
    jobs: list[dict[str, Any]]  # the Job objects the forecaster is told of


def job_pod(name: str, gpus: int, *, job: str = "", duration: str | None = None) -> dict[str, Any]:
    obj = gpu_pod(name, gpus, namespace="ml")
    if duration is not None:
        obj["metadata"]["annotations"] = {EXPECTED_DURATION: duration}
    if job:
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-{job}"}
            | {"controller": True}
        ]
    return obj


@pytest.fixture
async def live(aiohttp_client: Any) -> AsyncIterator[Live]:
    clocks = Clocks()
    inventory = Inventory()
    cluster = MemoryCluster(inventory)
    cluster.add_node("n0", topology=discover_profile("dgx-a100", hostname="n0"))
    runtime = memory_runtime(
        inventory, cluster, clock=lambda: clocks.mono, wall_clock=lambda: clocks.wall
    )
    forecasts = Forecasts(wall=lambda: clocks.wall)
    runtime.scheduler.forecasts = forecasts
    jobs: list[dict[str, Any]] = []
    forecaster = LiveForecaster(
        runtime.scheduler,
        forecasts,
        profiles=build_profiles,
        restate=runtime.scheduler.restate,
        wall=lambda: clocks.wall,
        poll_s=3600,  # the tests refresh by hand
        jobs=lambda: jobs,
    )
    app = build_app(inventory, extra_routes=pending.ROUTES)
    app[SCHEDULER] = SchedulerSlot(runtime.scheduler)
    client = await aiohttp_client(app)
    async with runtime:
        forecaster.start(runtime.started)
        await runtime.started.wait()
        try:
            yield Live(client, cluster, runtime, forecaster, forecasts, clocks, jobs)
        finally:
            await forecaster.stop()


async def refreshed(live: Live, key: str) -> Forecast:
    """The forecaster run once: ``key``'s forecast (there must be one)."""
    await live.forecaster.refresh()
    forecast = live.forecasts.get(key)
    assert forecast is not None, f"no forecast for {key}"
    return forecast


def failures(cluster: MemoryCluster, name: str) -> list[str]:
    return [
        e["message"] for e in cluster.events("ml", name) if e.get("reason") == "FailedScheduling"
    ]


def condition(cluster: MemoryCluster, name: str) -> str:
    obj = cluster.pod("ml", name)
    assert obj is not None
    found = [c for c in obj["status"]["conditions"] if c["type"] == "PodScheduled"]
    return str(found[0]["message"])


async def settle(live: Live, until: Callable[[], bool] | None = None) -> None:
    await live.runtime.settle()
    await live.runtime.scheduler.drain()


async def test_a_waiting_pod_shows_when_it_starts_and_whose_end_it_waits_for(live: Live) -> None:
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    live.clocks.advance(300)  # train-7 has run 5 of its 20 minutes
    live.cluster.create_pod(job_pod("train-8", 8))
    await settle(live)
    assert failures(live.cluster, "train-8") == [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    ]

    forecast = await refreshed(live, "ml/train-8")
    assert forecast.after == ("ml/train-7",)
    assert forecast.sources == {"ml/train-7": "annotation"}
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(900, abs=15)

    doc = await (await live.client.get("/v1/pending")).json()
    (line,) = doc["pods"]
    start = line["expected_start"]
    assert start["message"] == "expected to start in ~15 min, when train-7 ends"
    assert start["waits_for"] == {"ml/train-7": "annotation"}
    assert start["node"] == "n0"
    assert start["in_s"] == pytest.approx(900, abs=15)

    # The condition says it too, at once: its first forecast completes the explanation.
    await settle(live)
    said = condition(live.cluster, "train-8")
    assert re.fullmatch(
        r"0/1 nodes are available: 1 Insufficient nvidia\.com/gpu\.; expected to start in "
        r"~15 min \(about \d\d:\d\d UTC\), when train-7 ends",
        said,
    ), said


async def test_a_forecast_worker_that_died_is_replaced_and_the_forecast_still_made(
    live: Live,
) -> None:
    """The worker process the coordinator runs forecasts in is killed (OOM killer, a stray
    signal): the next refresh starts another and forecasts, rather than failing for good."""
    pool = forecast_worker.start()
    forecaster = LiveForecaster(
        live.runtime.scheduler,
        live.forecasts,
        profiles=build_profiles,
        wall=lambda: live.clocks.wall,
        poll_s=3600,
        executor=pool,
        new_executor=forecast_worker.start,
    )
    try:
        live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
        await settle(live)
        live.cluster.create_pod(job_pod("train-8", 8))
        await settle(live)
        os.kill(pool.submit(os.getpid).result(timeout=60), signal.SIGKILL)

        await forecaster.refresh()
        forecast = live.forecasts.get("ml/train-8")
        assert forecast is not None
        assert forecast.after == ("ml/train-7",)
        assert forecaster.executor is not pool
    finally:
        for used in {pool, forecaster.executor}:
            assert isinstance(used, concurrent.futures.ProcessPoolExecutor)
            forecast_worker.stop_now(used)


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that counts the forward runs it is asked for."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.asked = 0

    def submit(
        self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[R]:
        self.asked += 1
        return super().submit(fn, *args, **kwargs)


def polling(live: Live, executor: concurrent.futures.Executor) -> LiveForecaster:
    """A forecaster polled by hand (poll_s 5 s of the test clock), forward runs on ``executor``."""
    return LiveForecaster(
        live.runtime.scheduler,
        live.forecasts,
        profiles=build_profiles,
        restate=live.runtime.scheduler.restate,
        wall=lambda: live.clocks.wall,
        poll_s=5.0,
        executor=executor,
    )


async def train_8_waits_for_train_7(live: Live) -> None:
    """train-7 (20 min) takes the node's 8 GPUs; train-8 (10 min) fails and waits for them."""
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    live.cluster.create_pod(job_pod("train-8", 8, duration="10m"))
    await settle(live)


async def test_a_pod_bound_within_its_first_poll_gets_no_forecast_one_that_waits_does(
    live: Live,
) -> None:
    """A pod that fails once and is bound a few seconds later (the node or pod event it waited
    for came) gets no forecast and costs no forward run (in the app, none starts the worker
    process); a pod that keeps waiting gets its forecast at the poll after it waited one."""
    executor = CountingExecutor()
    forecaster = polling(live, executor)
    try:
        await train_8_waits_for_train_7(live)
        assert failures(live.cluster, "train-8")
        assert not await forecaster.poll()

        live.clocks.advance(2)
        live.cluster.finish_pod("ml", "train-7")  # ended early: train-8 is bound
        await settle(live)
        assert live.cluster.pod("ml", "train-8")["spec"].get("nodeName") == "n0"
        live.clocks.advance(3)
        assert not await forecaster.poll()
        assert executor.asked == 0
        assert live.forecasts.get("ml/train-8") is None
        assert all("expected" not in m for m in failures(live.cluster, "train-8"))

        live.cluster.create_pod(job_pod("train-9", 8))
        await settle(live)  # no room until train-8 ends
        assert not await forecaster.poll()  # the first poll that sees it waiting
        await settle(live)
        assert "expected" not in condition(live.cluster, "train-9")
        live.clocks.advance(forecaster.poll_s)
        assert await forecaster.poll()  # it has waited a poll
        assert executor.asked == 1
        forecast = live.forecasts.get("ml/train-9")
        assert forecast is not None
        assert forecast.after == ("ml/train-8",)
        await settle(live)
        assert "expected to start in ~10 min" in condition(live.cluster, "train-9")
    finally:
        executor.shutdown()


async def test_a_node_the_scheduler_does_not_fill_is_no_room_in_the_forecast(live: Live) -> None:
    """A node outside the scheduler's node selector (another team's, another test's) has free
    GPUs: the forecast waits for train-7 as the scheduler will, not for that node."""
    live.cluster.add_node("other", topology=discover_profile("dgx-a100", hostname="other"))
    live.runtime.scheduler.view.node_filter = lambda state: state.name == "n0"
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    live.cluster.create_pod(job_pod("train-8", 8))
    await settle(live)
    assert failures(live.cluster, "train-8") == [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    ]

    forecast = await refreshed(live, "ml/train-8")
    assert (forecast.node, forecast.after) == ("n0", ("ml/train-7",))
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(1200, abs=15)


async def test_a_pod_refused_for_its_own_spec_gets_no_forecast(live: Live) -> None:
    """A pod whose keys are invalid starts only once edited: its condition names the key and
    promises no start, and the forecaster has nothing to refresh for it."""
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    bad = job_pod("train-8", 8)
    bad["metadata"]["annotations"] = {"topos.io/slice-topology": "leaf"}  # no slice size
    live.cluster.create_pod(bad)
    await settle(live)
    await live.forecaster.refresh()
    await settle(live)
    assert live.forecasts.get("ml/train-8") is None
    said = condition(live.cluster, "train-8")
    assert "topos.io/slice-topology" in said
    assert "expected" not in said
    assert not live.forecaster._due(live.clocks.wall + 1)  # nothing of its own to wait for


async def test_an_unchanged_forecast_writes_nothing_and_a_moved_one_at_most_once_a_minute(
    live: Live,
) -> None:
    live.cluster.create_pod(job_pod("train-7", 8, duration="60m"))
    await settle(live)
    live.cluster.create_pod(job_pod("train-8", 8))
    await settle(live)
    live.clocks.advance(61)
    await live.forecaster.refresh()
    await settle(live)
    written = len(failures(live.cluster, "train-8"))
    assert written == 2  # the failure, then the failure with its forecast
    for _ in range(3):  # the same prediction again: no write
        live.clocks.advance(61)
        await live.forecaster.refresh()
        await settle(live)
    assert len(failures(live.cluster, "train-8")) == written

    # A more urgent pod of 10 minutes arrives ahead of it: the start moves by 10 minutes — made
    # and stated once train-8's forecast is a minute old.
    urgent = job_pod("urgent", 8, duration="10m")
    urgent["spec"]["priority"] = 100
    urgent["spec"]["preemptionPolicy"] = "Never"  # it waits for train-7 too
    live.cluster.create_pod(urgent)
    await settle(live)
    await live.forecaster.refresh()
    await settle(live)
    assert "when urgent ends" not in condition(live.cluster, "train-8")
    live.clocks.advance(61)
    await live.forecaster.refresh()
    await settle(live)
    said = condition(live.cluster, "train-8")
    assert "when urgent ends" in said
    assert "~65 min" in said  # train-7's 60 - 6 minutes, then urgent's 10
    written = len(failures(live.cluster, "train-8"))

    # It goes again within the minute: the forecast moves back, but not before its minute.
    live.clocks.advance(10)
    live.cluster.delete_pod("ml", "urgent")
    await settle(live)
    await live.forecaster.refresh()
    await settle(live)
    assert len(failures(live.cluster, "train-8")) == written
    forecast = live.forecasts.get("ml/train-8")
    assert forecast is not None
    assert forecast.after == ("ml/urgent",)
    live.clocks.advance(51)  # the forecast is a minute old: it is made again, and stated
    await live.forecaster.refresh()
    await settle(live)
    messages = failures(live.cluster, "train-8")
    assert len(messages) == written + 1
    assert "when train-7 ends" in messages[-1]


async def test_a_runtime_is_learned_from_a_real_pod_end(live: Live) -> None:
    live.cluster.create_pod(job_pod("etl-0", 8, job="etl"))
    await settle(live)
    live.clocks.advance(600)
    live.cluster.finish_pod("ml", "etl-0")  # ran 10 minutes
    await settle(live)
    assert live.forecaster.learned == 1

    live.cluster.create_pod(job_pod("etl-1", 8, job="etl"))  # the same Job and shape
    await settle(live)
    live.clocks.advance(120)
    live.cluster.create_pod(job_pod("next", 8))
    await settle(live)
    forecast = await refreshed(live, "ml/next")
    assert forecast.sources == {"ml/etl-1": "learned"}
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(480, abs=15)


async def test_a_pod_preempted_evicted_or_deleted_teaches_no_runtime(live: Live) -> None:
    live.cluster.create_pod(job_pod("etl-0", 8, job="etl"))
    await settle(live)
    live.clocks.advance(600)
    live.cluster.delete_pod("ml", "etl-0")  # deleted 10 minutes in: no natural end
    await settle(live)
    live.cluster.create_pod(job_pod("etl-1", 8, job="etl"))
    await settle(live)
    live.clocks.advance(300)
    await live.cluster.evict(PodRef("ml", "etl-1"))  # preempted 5 minutes in
    await settle(live)
    assert live.forecaster.learned == 0

    live.cluster.create_pod(job_pod("etl-2", 8, job="etl"))
    await settle(live)
    live.clocks.advance(100)
    live.cluster.finish_pod("ml", "etl-2")  # ran to its end: 100 s
    await settle(live)
    assert live.forecaster.learned == 1
    live.cluster.create_pod(job_pod("etl-3", 8, job="etl"))
    live.cluster.create_pod(job_pod("next", 8))
    await settle(live)
    forecast = await refreshed(live, "ml/next")
    assert forecast.sources == {"ml/etl-3": "learned"}
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(100, abs=15)


async def test_a_running_pod_of_a_job_with_a_deadline_ends_by_it(live: Live) -> None:
    live.jobs.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "sweep", "namespace": "ml", "uid": "uid-sweep"},
            "spec": {"activeDeadlineSeconds": 900},
            "status": {"startTime": stamp(live.clocks.wall)},
        }
    )
    live.cluster.create_pod(job_pod("sweep-0", 8, job="sweep"))
    await settle(live)
    live.clocks.advance(300)
    live.cluster.create_pod(job_pod("next", 8))
    await settle(live)
    forecast = await refreshed(live, "ml/next")
    assert forecast.sources == {"ml/sweep-0": "deadline"}
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(600, abs=15)


def stamp(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_a_pod_running_with_no_expected_end_gives_no_start(live: Live) -> None:
    live.cluster.create_pod(job_pod("forever", 8))
    await settle(live)
    live.cluster.create_pod(job_pod("next", 8))
    await settle(live)
    await live.forecaster.refresh()
    doc = await (await live.client.get("/v1/pending")).json()
    start = doc["pods"][0]["expected_start"]
    assert start["message"] == "no start expected within 24 h (1 running pod with no expected end)"
    assert "in_s" not in start
    # Nothing to wait for: not a status write of its own at once (in a cluster whose pods
    # declare no ends, that was one more write for every waiting pod) ...
    await settle(live)
    assert (
        condition(live.cluster, "next") == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )
    # ... but said with its next explanation (here: tried again at the minute's flush).
    live.clocks.advance(61)
    live.runtime.scheduler.queue.notify()  # the loop looks at the queue again
    await settle(live)
    assert condition(live.cluster, "next") == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.; "
        "no start expected within 24 h (1 running pod with no expected end)"
    )


async def test_what_if_predicts_its_start_and_suggests_waiting_first(live: Live) -> None:
    live.cluster.create_pod(job_pod("train-7", 8, duration="30m"))
    await settle(live)
    whatif = WhatIf(
        live.runtime.scheduler, predictor=live.forecaster, wall=lambda: live.clocks.wall
    )
    answer = await whatif.answer_predicted([job_pod("mine", 4)])
    assert not answer.fits
    assert answer.predicted_start_s == pytest.approx(1800, abs=15)
    assert answer.waits_for == ["ml/train-7"]
    first = answer.suggestions[0]
    assert (first.rank, first.kind) == (1, "wait")
    assert first.summary == "wait ~30 min for ml/train-7 (annotation) to end"
    assert [s.rank for s in answer.suggestions] == list(range(1, len(answer.suggestions) + 1))
    # Nothing of it was queued or left behind.
    assert [e.key for e in live.runtime.scheduler.queue.entries() if e.where != "bound"] == []


async def test_pods_not_tried_yet_call_for_no_forecast_a_pod_that_failed_does(live: Live) -> None:
    """A stream of new pods, most bound at once, must not copy the cluster and run it forward
    (not every poll, nor once a minute); a pod an attempt could not place waits for its
    forecast to be explained."""
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    await live.forecaster.refresh()
    assert not live.forecaster._due(live.clocks.wall + 1)

    live.cluster.create_pod(job_pod("train-8", 8))  # queued, not tried yet
    (entry,) = [e for e in live.runtime.scheduler.queue.entries() if e.key == "ml/train-8"]
    assert entry.where == "active"
    assert not entry.last_message
    assert not live.forecaster._due(live.clocks.wall + 1)
    assert not live.forecaster._due(live.clocks.wall + 3600)  # the queue changed: still nothing

    await settle(live)  # tried: no room until train-7 ends
    assert failures(live.cluster, "train-8")
    seen = live.clocks.wall + 1
    assert not live.forecaster._due(seen)  # just failed: mostly bound within seconds
    assert live.forecaster._due(seen + live.forecaster.poll_s)  # waited a poll: forecast


async def test_a_forecast_waits_while_the_scheduler_has_pods_not_tried_yet_a_minute_at_most(
    live: Live,
) -> None:
    """A stream of pods being placed: the forecast of a pod that waits is put off until the pods
    not tried yet are placed (the copy would be stale within the second, and the forward run
    would place them all again: every poll, 5 s), but never for more than a minute."""
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    live.cluster.create_pod(job_pod("train-8", 8))
    await settle(live)  # tried: no room until train-7 ends
    assert failures(live.cluster, "train-8")
    poll = live.forecaster.poll_s
    seen = live.clocks.wall + 1
    assert not live.forecaster._due(seen)
    assert live.forecaster._due(seen + poll)  # it has waited a poll

    live.cluster.create_pod(job_pod("train-9", 1))  # the next of a stream: not tried yet
    now = seen + poll
    assert not live.forecaster._due(now)
    assert not live.forecaster._due(now + 59)
    assert live.forecaster._due(now + 60)  # a minute of pods still coming: forecast anyway
    await live.forecaster.refresh()
    assert live.forecasts.get("ml/train-8") is not None

    live.cluster.create_pod(job_pod("train-10", 8))  # fails too, once tried: no forecast yet
    live.cluster.create_pod(job_pod("train-11", 1))
    later = live.clocks.wall + 2  # train-8's forecast is 2 s old
    assert not live.forecaster._due(later)  # neither tried
    await settle(live)  # both tried: nothing left to place, train-10 waits with no forecast
    assert failures(live.cluster, "train-10")
    assert not live.forecaster._due(later)  # ... not for a poll yet
    assert live.forecaster._due(later + poll)


async def test_a_pod_held_back_until_its_claim_exists_calls_for_no_forecast(live: Live) -> None:
    """A pod whose ResourceClaim is not there yet (made from its template by
    kube-controller-manager, usually within milliseconds) is held back before its first attempt:
    it gets no forecast of its own (the cluster copied and run forward for it, on every batch of
    such pods, cost more CPU than scheduling them) and, being still to be tried, puts off the
    forecast of a pod that waits, a minute at most."""
    claimed = pod(
        "infer",
        namespace="ml",
        spec={"resourceClaims": [{"name": "gpus", "resourceClaimName": "infer-gpus"}]},
    )
    live.cluster.create_pod(claimed)
    await settle(live)
    (entry,) = [e for e in live.runtime.scheduler.queue.entries() if e.key == "ml/infer"]
    assert (entry.where, entry.attempts) == ("unschedulable", 0)
    assert entry.last_message == "waiting for resource claim infer-gpus to be created"
    assert not failures(live.cluster, "infer")
    now = live.clocks.wall + 1
    assert not live.forecaster._due(now)
    assert not live.forecaster._due(now + 3600)

    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    live.cluster.create_pod(job_pod("train-8", 8))
    await settle(live)  # tried: no room until train-7 ends
    assert failures(live.cluster, "train-8")
    later = live.clocks.wall + 2
    assert not live.forecaster._due(later)  # train-8 just failed
    waited = later + live.forecaster.poll_s
    assert not live.forecaster._due(waited)  # it has waited a poll: infer is still to be tried
    assert live.forecaster._due(waited + 60)


def with_claim(name: str, gpus: int, claim_name: str) -> dict[str, Any]:
    obj = job_pod(name, gpus)
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}
    obj["spec"]["volumes"] = [volume]
    return obj


def claim_meta(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ml",
        "uid": f"uid-{name}",
        "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
    }


async def test_a_pod_whose_volume_is_on_a_full_node_waits_for_that_node(live: Live) -> None:
    """n1 is free, but the pod's claim is bound to a PV on n0, which train-7 fills for 20
    minutes: the live scheduler refuses it now, and its forecast waits for train-7 on n0."""
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    live.cluster.add_node("n1", topology=discover_profile("dgx-a100", hostname="n1"))
    volumes = live.cluster.volumes
    volumes.apply(storage_class("local"))
    volumes.apply(local_pv("pv-0", "n0", claim_ref=("data", "uid-data"), namespace="ml"))
    volumes.apply({**claim("data", volume="pv-0", bound=True), "metadata": claim_meta("data")})
    live.cluster.create_pod(with_claim("reader", 8, "data"))
    await settle(live)
    assert failures(live.cluster, "reader")

    forecast = await refreshed(live, "ml/reader")
    assert (forecast.node, forecast.after) == ("n0", ("ml/train-7",))
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(1_200, abs=15)


async def test_a_read_write_once_pod_claim_in_use_is_free_when_its_pod_ends(live: Live) -> None:
    """A ReadWriteOncePod claim used by a running pod: the forecast's copy of that pod names
    its claims, so the waiting pod (room enough beside it) starts when it ends, not now."""
    volumes = live.cluster.volumes
    volumes.apply(storage_class("local"))
    volumes.apply(local_pv("pv-0", None, claim_ref=("solo", "uid-solo"), namespace="ml"))
    solo = claim("solo", volume="pv-0", bound=True, modes=("ReadWriteOncePod",))
    volumes.apply({**solo, "metadata": claim_meta("solo")})
    holder = with_claim("holder", 1, "solo")
    holder["metadata"]["annotations"] = {EXPECTED_DURATION: "30m"}
    live.cluster.create_pod(holder)
    await settle(live)
    live.cluster.create_pod(with_claim("second", 1, "solo"))
    await settle(live)
    assert failures(live.cluster, "second")

    forecast = await refreshed(live, "ml/second")
    assert forecast.after == ("ml/holder",)
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(1_800, abs=15)


async def test_a_pod_waiting_for_a_host_port_starts_when_its_holder_ends(live: Live) -> None:
    """The node has room for both, but the running pod holds host port 8080 for 20 minutes:
    the forecast's copy keeps the port taken, so the waiting pod starts when it ends, not now."""
    port = [{"containerPort": 80, "hostPort": 8080}]
    holder = job_pod("holder", 1, duration="20m")
    holder["spec"]["containers"][0]["ports"] = port
    live.cluster.create_pod(holder)
    await settle(live)
    waiting = job_pod("web", 1)
    waiting["spec"]["containers"][0]["ports"] = port
    live.cluster.create_pod(waiting)
    await settle(live)
    assert failures(live.cluster, "web")

    forecast = await refreshed(live, "ml/web")
    assert forecast.after == ("ml/holder",)
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(1_200, abs=15)


async def test_a_pod_over_the_volume_limit_starts_when_an_inline_volumes_pod_ends(
    live: Live,
) -> None:
    """n0's CSINode allows one EBS volume, which a running pod's inline ``awsElasticBlockStore``
    volume takes for 20 minutes: the forecast's copy counts it, so the pod with an EBS claim
    starts when that pod ends, not now."""
    volumes = live.cluster.volumes
    volumes.apply(csi_node("n0", ebs=1))
    made, volume = csi_volume("data")
    volumes.apply(volume)
    volumes.apply({**made, "metadata": claim_meta("data")})
    holder = job_pod("holder", 1, duration="20m")
    inline = {"name": "disk", "awsElasticBlockStore": {"volumeID": "vol-1"}}
    holder["spec"]["volumes"] = [inline]
    live.cluster.create_pod(holder)
    await settle(live)
    live.cluster.create_pod(with_claim("reader", 1, "data"))
    await settle(live)
    assert "exceed max volume count" in failures(live.cluster, "reader")[-1]

    forecast = await refreshed(live, "ml/reader")
    assert forecast.after == ("ml/holder",)
    assert forecast.starts_in(live.clocks.wall) == pytest.approx(1_200, abs=15)


async def test_a_pod_waiting_for_its_claim_to_be_made_has_an_unknown_start(live: Live) -> None:
    """Forecast beside a pod that waits (its claim is made by kube-controller-manager or its
    user, when no copy knows): the API says why, never "now"."""
    claimed = pod(
        "infer",
        namespace="ml",
        spec={"resourceClaims": [{"name": "gpus", "resourceClaimName": "infer-gpus"}]},
    )
    live.cluster.create_pod(claimed)
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    live.cluster.create_pod(job_pod("train-8", 8))
    await settle(live)

    await live.forecaster.refresh()
    doc = await (await live.client.get("/v1/pending")).json()
    starts = {p["name"]: p["expected_start"] for p in doc["pods"]}
    assert starts["infer"]["message"] == (
        "start unknown: waiting for resource claim infer-gpus to be created"
    )
    assert starts["infer"]["unknown"] == "waiting for resource claim infer-gpus to be created"
    assert "in_s" not in starts["infer"]
    assert starts["train-8"]["in_s"] == pytest.approx(1_200, abs=15)


async def test_a_start_unknown_for_a_claim_since_bound_is_not_repeated(live: Live) -> None:
    """The forecast said the start is unknown while the pod's claim was unbound (Immediate
    binding); once the PV controller binds it, the pod is refused for GPUs alone, and its
    condition does not repeat the claim's old reason beside the new refusal."""
    live.cluster.create_pod(job_pod("train-7", 8, duration="20m"))
    await settle(live)
    volumes = live.cluster.volumes
    volumes.apply(storage_class("fast", mode="Immediate"))
    volumes.apply({**claim("data", cls="fast"), "metadata": claim_meta("data")})
    live.cluster.create_pod(with_claim("reader", 8, "data"))
    await settle(live)
    await live.forecaster.refresh()
    await settle(live)
    unbound = "pod has unbound immediate PersistentVolumeClaims"
    assert condition(live.cluster, "reader").endswith(f"{unbound}.; start unknown")

    volumes.apply(
        local_pv("pv-0", "n0", cls="fast", claim_ref=("data", "uid-data"), namespace="ml")
    )
    bound = claim("data", cls="fast", volume="pv-0", bound=True)
    volumes.apply({**bound, "metadata": claim_meta("data")})
    live.clocks.advance(11)  # its backoff over
    await settle(live)
    said = condition(live.cluster, "reader")
    assert "nvidia.com/gpu" in said
    assert unbound not in said


async def test_what_if_for_a_pod_whose_claim_is_not_made_says_why(live: Live) -> None:
    whatif = WhatIf(
        live.runtime.scheduler, predictor=live.forecaster, wall=lambda: live.clocks.wall
    )
    mine = pod(
        "mine",
        namespace="ml",
        spec={"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]},
    )
    answer = await whatif.answer_predicted([mine])
    assert answer.predicted_start_s is None
    assert (
        "start not predicted: mine: waiting for resource claim gpus (template two-gpus) "
        "to be created"
    ) in answer.notes


class SlowExecutor(CountingExecutor):
    """Each forward run takes ``run_s`` of the test's wall clock."""

    def __init__(self, clocks: Clocks, run_s: float) -> None:
        super().__init__()
        self.clocks, self.run_s = clocks, run_s

    def submit(
        self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[R]:
        self.clocks.advance(self.run_s)
        return super().submit(fn, *args, **kwargs)


async def test_the_worker_takes_a_tenth_of_a_core_however_fast_pods_come_and_fail(
    live: Live,
) -> None:
    """A forward run that took 30 s is followed by the next one 300 s after it began at the
    earliest: a pod that waited a poll with no forecast meanwhile gets it then, not at once."""
    executor = SlowExecutor(live.clocks, 30.0)
    forecaster = polling(live, executor)
    try:
        await train_8_waits_for_train_7(live)
        assert not await forecaster.poll()
        live.clocks.advance(5)
        began = live.clocks.wall
        assert await forecaster.poll()  # it ran for 30 s
        assert live.forecasts.last_run_s == 30.0
        assert live.forecasts.get("ml/train-8") is not None

        live.cluster.create_pod(job_pod("train-9", 8))
        await settle(live)
        assert not await forecaster.poll()  # the poll that first sees it waiting
        live.clocks.advance(5)
        assert not await forecaster.poll()  # waited a poll, but the worker rests
        live.clocks.advance(began + 299 - live.clocks.wall)
        assert not await forecaster.poll()
        assert executor.asked == 1
        assert live.forecasts.get("ml/train-9") is None
        live.clocks.advance(1)  # 300 s after the run began: 30 s is a tenth of it
        assert await forecaster.poll()
        assert executor.asked == 2
        assert live.forecasts.get("ml/train-9") is not None
    finally:
        executor.shutdown()


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_share_of_a_core_that_is_none_is_refused_naming_it(live: Live, share: float) -> None:
    with pytest.raises(ValueError, match=rf"cpu_share: {share!r} is not a share of one core"):
        LiveForecaster(
            live.runtime.scheduler, live.forecasts, profiles=build_profiles, cpu_share=share
        )
