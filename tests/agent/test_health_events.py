"""NVML events to GPU health: the watcher registers every GPU on the profile-driven fake NVML,
an injected XID reaches the agent as an event for that GPU's UUID, application XIDs are not
fatal, a fatal one marks exactly that GPU unhealthy in later snapshots, and stopping is prompt."""

from __future__ import annotations

import asyncio

from agent.devices import ProfileSource
from agent.devices.profiles import profile_from_mapping
from agent.health import GpuEvent, HealthLedger, NvmlEventWatcher
from tests.support.fake_profiles import TWO_L40S


def _source() -> ProfileSource:
    return ProfileSource(profile_from_mapping(TWO_L40S))


def test_injected_xid_is_read_for_the_right_gpu() -> None:
    with _source() as source:
        watcher = NvmlEventWatcher(source.nvml, wait_ms=10)
        assert watcher.open() == 2
        try:
            assert watcher.wait_once() is None  # nothing happened: a timeout, not an error
            assert source.nvml.inject_event(1, xid=79) == 1
            event = watcher.wait_once()
            assert event == GpuEvent(uuid=source.nvml.gpu_uuids()[1], reason="XID 79", xid=79)
            assert event.fatal
            source.nvml.inject_event(0)  # double-bit ECC
            ecc = watcher.wait_once()
            assert ecc is not None
            assert ecc.uuid == source.nvml.gpu_uuids()[0]
            assert ecc.reason == "double-bit ECC error"
            assert ecc.fatal
        finally:
            watcher.close()
        assert source.nvml.inject_event(1, xid=79) == 0  # the set was freed


def test_ledger_marks_only_fatal_events_and_only_that_gpu() -> None:
    with _source() as source:
        topology = source.discover()
    ledger = HealthLedger()
    uuid = topology.gpus[1].uuid
    assert not ledger.record(GpuEvent(uuid=uuid, reason="XID 31", xid=31))  # app page fault
    assert ledger.apply(topology) is topology
    assert ledger.record(GpuEvent(uuid=uuid, reason="XID 48", xid=48))
    assert not ledger.record(GpuEvent(uuid=uuid, reason="XID 79", xid=79))  # first reason stays
    marked = ledger.apply(topology)
    assert [g.healthy for g in marked.gpus] == [True, False]
    assert marked.gpus[1].health_reason == "XID 48"


async def test_watcher_delivers_events_to_the_loop_and_stops() -> None:
    with _source() as source:
        watcher = NvmlEventWatcher(source.nvml, wait_ms=20)
        received: list[GpuEvent] = []
        got = asyncio.Event()

        async def on_event(event: GpuEvent) -> None:
            received.append(event)
            got.set()

        task = asyncio.create_task(watcher.run(on_event))
        assert await asyncio.to_thread(watcher.opened.wait, 30)
        assert source.nvml.inject_event(0, xid=94) == 1
        await asyncio.wait_for(got.wait(), 60)
        watcher.stop()
        await asyncio.wait_for(task, 60)
    assert received[0].uuid == source.nvml.gpu_uuids()[0]
    assert received[0].xid == 94
