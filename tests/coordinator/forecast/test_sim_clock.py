"""The production engine on a simulated clock: its own timers (gang timeout and backoff, the
queue's backoff) fire at the simulated times production would fire them, and no wall time
passes while it waits."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from agent.devices import discover_profile
from coordinator.forecast.clock import EPOCH, SimulatedLoop, SimulationStalled
from coordinator.forecast.engine import SimulatedEngine
from devcluster.pods import pod

T = TypeVar("T")


def simulate(main: Callable[[], Awaitable[T]]) -> T:
    loop = SimulatedLoop()
    try:

        async def run() -> T:
            return await main()

        return loop.run_until_complete(run())
    finally:
        loop.close()


def gang_member(name: str, gang: str, size: int, gpus: int = 8) -> dict[str, Any]:
    return pod(name, gpus=gpus, gang=(gang, size))


def test_a_day_of_simulated_waiting_takes_no_wall_time() -> None:
    async def main() -> float:
        await asyncio.sleep(86_400)
        return asyncio.get_running_loop().time()

    began = time.perf_counter()
    assert simulate(main) == pytest.approx(86_400, abs=1e-9)
    assert time.perf_counter() - began < 5


def test_timers_fire_in_order_at_their_simulated_times() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []
        loop.call_later(30, lambda: fired.append(("b", loop.time())))
        loop.call_later(10, lambda: fired.append(("a", loop.time())))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 45)
        fired.append(("timeout", loop.time()))
        return fired

    fired = simulate(main)
    assert [name for name, _ in fired] == ["a", "b", "timeout"]
    # each at its time (a timer fires once time has reached it: a hair past, never before)
    assert [when for _, when in fired] == pytest.approx([10, 30, 45], abs=1e-9)


def test_a_deadline_a_hair_away_is_reached_not_chased_forever() -> None:
    """The engine's pattern: wait until ``backoff_until <= clock()``, sleeping for the time left.
    A deadline closer than asyncio's timer resolution once fired its timer early, over and over,
    with simulated time standing still."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(54_588)
        deadline = loop.time() + 1e-10  # closer than asyncio's default resolution (1 ns)
        wakeups = 0
        wakeup = asyncio.Event()  # the scheduler's: nothing sets it here
        while loop.time() < deadline:
            wakeups += 1
            assert wakeups < 10, "time stands still"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), deadline - loop.time())
        return wakeups

    assert simulate(main) >= 1


def test_a_loop_that_can_never_wake_again_says_so() -> None:
    async def main() -> None:
        await asyncio.Event().wait()  # nothing will ever set it, no timer is left

    with pytest.raises(SimulationStalled, match="no task is ready and no timer is set"):
        simulate(main)


def test_a_gang_times_out_at_the_production_timeout_in_simulated_time() -> None:
    """Nine 8-GPU pods on eight 8-GPU nodes never fit: the gang manager releases the gang at its
    default timeout (300 s), backs it off (10 s) and gives it another 300 s — all simulated."""

    async def main() -> tuple[list[float], list[str], int]:
        loop = asyncio.get_running_loop()
        async with SimulatedEngine() as engine:
            for k in range(8):
                name = f"gpu-{k}"
                engine.cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
            for k in range(9):
                engine.cluster.create_pod(gang_member(f"big-{k}", "big", 9))
            seen: list[float] = []
            while len(seen) < 2 and loop.time() < 2_000:
                await asyncio.sleep(1)
                events = engine.cluster.events("default", "big-0")
                timeouts = [e for e in events if e["reason"] == "GangTimeout"]
                if len(timeouts) > len(seen):
                    seen.append(loop.time())
            messages = [e["message"] for e in timeouts]
            bound = sum(1 for p in engine.cluster.pods() if p["spec"].get("nodeName"))
            return seen, messages, bound

    began = time.perf_counter()
    seen, messages, bound = simulate(main)
    assert time.perf_counter() - began < 30  # 600+ simulated seconds
    assert 300 <= seen[0] <= 301.5  # the default timeout, checked every 0.5 s tick
    assert 610 <= seen[1] <= 611.5  # its 10 s backoff, then a fresh 300 s
    assert messages[0].startswith("pod group big timed out after 300s: 0/9 members placed")
    assert bound == 0


def test_events_carry_simulated_timestamps() -> None:
    async def main() -> str:
        async with SimulatedEngine() as engine:
            topology = discover_profile("dgx-h100", hostname="gpu-0")
            engine.cluster.add_node("gpu-0", topology=topology)
            await asyncio.sleep(3_600)  # an hour in, a pod that can never fit arrives
            engine.cluster.create_pod(pod("huge", gpus=16))
            await engine.runtime.settle()
            (event,) = engine.cluster.events("default", "huge")
            return str(event["firstTimestamp"])

    stamp = simulate(main)
    assert stamp == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH + 3_600))


def test_an_idle_engine_sleeps_until_something_is_due() -> None:
    """A running gang and nothing else happening for a simulated day: the gang ticker wakes at
    its idle interval (30 s), not every half second — a replay of weeks jumps from event to
    event. A gang still short of members then times out at its timeout, not a tick later."""

    async def main() -> tuple[int, list[float]]:
        loop = asyncio.get_running_loop()
        async with SimulatedEngine() as engine:
            ticks = 0
            tick = engine.gangs.step.tick

            def counted() -> None:
                nonlocal ticks
                ticks += 1
                tick()

            engine.gangs.step.tick = counted  # type: ignore[method-assign]
            for k in range(2):
                name = f"gpu-{k}"
                engine.cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
            for k in range(2):
                engine.cluster.create_pod(gang_member(f"run-{k}", "run", 2))
            await asyncio.sleep(86_400)
            day = ticks
            began = loop.time()
            engine.cluster.create_pod(gang_member("short-0", "short", 2))  # 1 of 2: never full
            seen: list[float] = []
            while not seen and loop.time() < began + 1_000:
                await asyncio.sleep(1)
                events = engine.cluster.events("default", "short-0")
                if any(e["reason"] == "GangTimeout" for e in events):
                    seen.append(loop.time() - began)
            return day, seen

    day, seen = simulate(main)
    assert 86_400 / 31 <= day <= 86_400 / 30  # was 172,800 (every 0.5 s)
    assert seen
    assert 300 <= seen[0] <= 301.5


def test_a_waiting_gang_whose_pods_are_deleted_is_forgotten_at_once() -> None:
    """Between deadlines the ticker sleeps; a deletion wakes it: the gang is gone from the
    manager (``/v1/gangs``) within a tick, not at its timeout."""

    async def main() -> tuple[bool, bool]:
        async with SimulatedEngine() as engine:
            topology = discover_profile("dgx-h100", hostname="gpu-0")
            engine.cluster.add_node("gpu-0", topology=topology)
            for k in range(2):
                engine.cluster.create_pod(gang_member(f"w-{k}", "w", 3))  # 2 of 3
            await asyncio.sleep(60)
            manager = engine.gangs.step.manager
            known = any(s.name == "w" for s in manager.statuses())
            for k in range(2):
                engine.cluster.delete_pod("default", f"w-{k}")
            await asyncio.sleep(1)
            return known, any(s.name == "w" for s in manager.statuses())

    known, still = simulate(main)
    assert known
    assert not still
