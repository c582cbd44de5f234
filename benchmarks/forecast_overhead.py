"""What a live forecast refresh costs the scheduling path (``coordinator.forecast.live``).

An in-memory cluster of ``--nodes`` DGX A100 nodes, each running one 8-GPU pod with a declared
duration (30–119 min), and ``--pending`` pending 8-GPU pods that fit nowhere until those end (so
every refresh forecasts them all, running simulated time forward until the last binds);
``--stuck N`` adds N pending 1-GPU pods whose ``nodeSelector`` no node matches (a cluster's
pods that never start: they should cost the forward run nothing).
Measured:

- the copy (the only part on the event loop): its wall time;
- the forward run (in a worker process, as the coordinator runs it; ``--thread``: in a thread):
  its wall time;
- the event loop's lag while a refresh runs: a 10 ms ticker's worst delay;
- scheduling while refreshes run back to back against none: create → bound of ``--pods``
  CPU-only pods (they fit beside the GPU pods), created one every 20 ms, p50 / p99.

Run: ``.venv/bin/python -m benchmarks.forecast_overhead [--nodes 1000] [--pending 50]
[--stuck 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Sequence

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.registry import build_profiles
from coordinator.engine.binder import BindJob
from coordinator.engine.forecasts import Forecasts
from coordinator.engine.ports import ClusterError
from coordinator.engine.service import SchedulerRuntime
from coordinator.forecast.live import LiveForecaster
from coordinator.forecast.runtimes import EXPECTED_DURATION
from coordinator.inventory.store import Inventory
from devcluster.pods import gpu_pod, pod


def _q(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _binds(
    cluster: MemoryCluster, runtime: SchedulerRuntime, pods: int, tag: str
) -> list[float]:
    scheduler = runtime.scheduler
    created: dict[str, float] = {}
    latency: list[float] = []
    done = asyncio.Event()

    def bound(job: BindJob, exc: ClusterError | None) -> None:
        began = created.get(job.request.key)
        if exc is None and began is not None:
            latency.append(time.perf_counter() - began)
            if len(latency) == pods:
                done.set()

    scheduler.bind_listeners.append(bound)
    for i in range(pods):
        obj = pod(f"{tag}-{i}", cpu="1", memory="1Gi", namespace="bench")
        created[f"bench/{tag}-{i}"] = time.perf_counter()
        cluster.create_pod(obj)
        await asyncio.sleep(0.02)
    await asyncio.wait_for(done.wait(), 300)
    scheduler.bind_listeners.remove(bound)
    for i in range(pods):
        cluster.delete_pod("bench", f"{tag}-{i}")
    return latency


async def main_async(nodes: int, pending: int, pods: int, thread: bool, stuck: int = 0) -> None:
    inventory = Inventory(stale_ttl_s=1e9)
    cluster = MemoryCluster(inventory)
    for i in range(nodes):
        name = f"n{i:05d}"
        cluster.add_node(name, topology=discover_profile("dgx-a100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    forecasts = Forecasts()
    runtime.scheduler.forecasts = forecasts
    executor = (
        None
        if thread
        else concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")
        )
    )
    forecaster = LiveForecaster(
        runtime.scheduler,
        forecasts,
        profiles=build_profiles,
        poll_s=3600,
        interval_s=0,
        executor=executor,
    )
    async with runtime:
        for i in range(nodes):
            obj = gpu_pod(f"run-{i}", 8, namespace="bench")
            obj["metadata"]["annotations"] = {EXPECTED_DURATION: f"{30 + i % 90}m"}
            cluster.create_pod(obj)
        await runtime.settle(timeout_s=600)
        for i in range(pending):
            cluster.create_pod(gpu_pod(f"big-{i}", 8, namespace="bench"))
        for i in range(stuck):  # a nodeSelector no node matches
            obj = gpu_pod(f"stuck-{i}", 1, namespace="bench")
            obj["spec"]["nodeSelector"] = {"example.com/pool": "gone"}
            cluster.create_pod(obj)
        await runtime.settle(timeout_s=600)
        forecaster.start(runtime.started)
        await asyncio.sleep(0)

        began = time.perf_counter()
        state = forecaster.copy()
        copy_s = time.perf_counter() - began
        lag: list[float] = []

        async def ticker() -> None:
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0.01)
                lag.append(time.perf_counter() - t - 0.01)

        if executor is not None:  # the process started and warm, as in a running coordinator
            await forecaster.refresh()
        tick = asyncio.create_task(ticker())
        began = time.perf_counter()
        await forecaster.refresh()
        refresh_s = time.perf_counter() - began
        tick.cancel()
        lag = lag or [0.0]
        with contextlib.suppress(asyncio.CancelledError):
            await tick
        print(
            f"{nodes} nodes, {len(state.running)} running, {len(state.pending)} pending: "
            f"copy on the loop {1000 * copy_s:.0f} ms; refresh {refresh_s:.2f} s "
            f"(forward run {forecasts.last_run_s:.2f} s in a {'thread' if thread else 'process'}); "
            "loop lag during it "
            f"p50 / max {1000 * statistics.median(lag):.1f} / {1000 * max(lag):.0f} ms"
        )

        quiet = await _binds(cluster, runtime, pods, "quiet")

        async def refreshing() -> None:
            while True:
                await forecaster.refresh()
                await asyncio.sleep(0)

        busy = asyncio.create_task(refreshing())
        loaded = await _binds(cluster, runtime, pods, "busy")
        busy.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await busy
        for name, values in (("no refresh", quiet), ("refreshing back to back", loaded)):
            print(
                f"create → bound, {name}: p50 {1000 * statistics.median(values):.1f} ms, "
                f"p99 {1000 * _q(values, 0.99):.1f} ms"
            )
        await forecaster.stop()
        if executor is not None:
            executor.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=50)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument(
        "--thread", action="store_true", help="forward runs in a thread (not a process)"
    )
    parser.add_argument(
        "--stuck", type=int, default=0, help="pending pods whose nodeSelector no node matches"
    )
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.nodes, args.pending, args.pods, args.thread, args.stuck))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
