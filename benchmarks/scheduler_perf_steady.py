"""scheduler_perf's ``createPods`` with ``steadyState: true``: keep a batch of pods coming for a
set ``duration``, and measure the throughput as upstream's collector does.

As upstream's ``createPodsSteadily`` and ``throughputCollector`` (``executor.go``, ``util.go``,
v1.36.3):

- the op creates ``count`` pods; each time every pod of the batch is seen bound it deletes the
  namespace's pods (one delete-collection, grace period 0) and creates the next ``count``;
  when ``duration`` is over it stops where it is (requests in flight are given up);
- the throughput is sampled once a second from the op's start: the first tick that sees a pod
  bound starts the series (it is not a sample), each later tick with new binds is one sample,
  pods bound since the last sample ÷ seconds since it, repeated for the ticks skipped in between
  for seeing none; the figure is the samples' average (upstream's ``SchedulingThroughput``
  ``Average``, which its ``threshold`` is compared with). Computed here from the bind times seen
  on a watch, after the run.

A pod's claims made from its ResourceClaimTemplate go when it does, as upstream's runner lets
them: kube-controller-manager's resourceclaim controller takes the deleted pod out of
``status.reservedFor`` and deallocates the claim, and its garbage collector deletes the claim
(the pod owns it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.kwok_run import Run
from benchmarks.scheduler_perf_objects import WorkloadError
from common.kube import PODS, KubeClient
from common.kube.errors import KubeError

__all__ = ["parse_duration", "steady_state", "throughput_samples"]

#: Go's ``time.ParseDuration`` units, in seconds.
_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
#: upstream's ``throughputSampleInterval``
SAMPLE_INTERVAL_S = 1.0


def parse_duration(text: object, where: str) -> float:
    """Seconds of a Go duration (``10s``, ``1m30s``, ``1.5h``, ``0``), as ``time.ParseDuration``
    reads it; anything else is an error naming ``where`` and the value."""
    if isinstance(text, str):
        body = text[1:] if text[:1] in "+-" else text
        if body == "0":
            return 0.0
        parts = _PART.findall(body)
        if body and "".join(n + u for n, u in parts) == body:
            total = sum(float(n) * _UNITS[u] for n, u in parts)
            return -total if text.startswith("-") else total
    raise WorkloadError(f"{where}: {text!r} is not a duration (e.g. 10s, 1m30s)")


def throughput_samples(
    bound: Sequence[float], start: float, end: float, interval: float = SAMPLE_INTERVAL_S
) -> list[float]:
    """Upstream's throughput samples (pods/s) for binds at times ``bound``, ticks every
    ``interval`` from ``start`` up to ``end`` (see the module)."""
    times = sorted(bound)
    samples: list[float] = []
    last_count, last_tick, started, skipped = 0, start, False, 0
    ticks = math.floor((end - start) / interval + 1e-9)
    seen = 0
    for k in range(1, ticks + 1):
        tick = start + k * interval
        while seen < len(times) and times[seen] <= tick:
            seen += 1
        if seen == 0:
            continue
        if not started:
            started, last_count, last_tick = True, seen, tick
            continue
        if seen == last_count:
            skipped += 1
            continue
        rate = (seen - last_count) / (tick - last_tick)
        samples += [rate] * (skipped + 1)
        last_count, last_tick, skipped = seen, tick, 0
    return samples


async def _watch_binds(
    kube: KubeClient, namespace: str, rv: str, run: Run, seen: asyncio.Event
) -> None:
    """Record when each pod of the namespace is first seen bound; wake ``seen`` at each."""
    while True:
        try:
            async for kind, obj in kube.watch(
                PODS, namespace=namespace, resource_version=rv, timeout_seconds=900
            ):
                now = time.perf_counter()
                meta = obj["metadata"]
                rv = meta.get("resourceVersion") or rv
                bound = kind in ("ADDED", "MODIFIED") and obj["spec"].get("nodeName")
                if bound and meta["name"] not in run.bound:
                    run.bound[meta["name"]] = now
                    seen.set()
        except KubeError as exc:
            print(f"watch of {namespace} broke ({exc}); resuming", file=sys.stderr)


async def steady_state(
    kube: KubeClient,
    namespace: str,
    body: Callable[[int], dict[str, Any]],
    count: int,
    duration_s: float,
    run: Run,
) -> tuple[float, float]:
    """Run the op in ``namespace`` (pod ``i`` is ``body(i)``), recording sends and binds in
    ``run``; returns the measured window (start, end) in ``time.perf_counter`` seconds."""
    listed = await kube.list(PODS, namespace=namespace, limit=1)
    seen = asyncio.Event()
    watcher = asyncio.create_task(
        _watch_binds(kube, namespace, listed["resourceVersion"], run, seen)
    )
    made = 0

    async def create(pod: dict[str, Any]) -> None:
        run.sent[pod["metadata"]["name"]] = time.perf_counter()
        await kube.create(PODS, pod, namespace=namespace)

    start = time.perf_counter()
    try:
        async with asyncio.timeout(duration_s):
            while True:
                batch = [body(made + j) for j in range(count)]
                made += count
                await asyncio.gather(*(create(p) for p in batch))
                names = [p["metadata"]["name"] for p in batch]
                while not all(n in run.bound for n in names):
                    seen.clear()
                    await seen.wait()
                await kube.delete_collection(PODS, namespace=namespace, grace_period_seconds=0)
    except TimeoutError:
        pass
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return start, start + duration_s
