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

``phases`` (``--phases``): where a batch's time goes, from a watch of the namespace's claims
beside the one of its pods: when each pod's claim was first seen made (by the resourceclaim
controller), named in the pod's ``status.resourceClaimStatuses``, given the scheduler's
``delete-protection`` finalizer, allocated, and the pod bound, in ms after its create was sent
(:func:`phase_medians`). The same watches for both schedulers: the differences are theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.kwok_run import Run
from benchmarks.scheduler_perf_objects import WorkloadError
from common.kube import PODS, RESOURCE_CLAIMS, KubeClient, Resource
from common.kube.errors import KubeError

__all__ = ["PHASES", "parse_duration", "phase_medians", "steady_state", "throughput_samples"]

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
#: A batch's steps, in order (``phases``), then the bind.
PHASES = ("claim made", "named in the pod", "protected", "allocated")
_PROTECTION = "resource.kubernetes.io/delete-protection"


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


def phase_medians(
    sent: Mapping[str, float],
    phases: Mapping[str, Mapping[str, float]],
    bound: Mapping[str, float],
) -> list[tuple[str, float]]:
    """Each of :data:`PHASES` and ``bound``: the median ms from a pod's create to it, over the
    pods seen through every one (``phases``: phase → pod name → when)."""
    names = [n for n in sent if n in bound and all(n in phases.get(p, {}) for p in PHASES)]
    if not names:
        return []
    steps = [*((p, phases[p]) for p in PHASES), ("bound", bound)]
    return [
        (label, 1000 * statistics.median(when[n] - sent[n] for n in names)) for label, when in steps
    ]


def _note(phases: dict[str, dict[str, float]], phase: str, pod: str, now: float) -> None:
    phases.setdefault(phase, {}).setdefault(pod, now)


async def _watch(
    kube: KubeClient,
    resource: Resource,
    namespace: str,
    rv: str,
    seen: Callable[[str, dict[str, Any], float], None],
) -> None:
    """Hand every event of ``resource`` in the namespace from ``rv`` on to ``seen``."""
    while True:
        try:
            async for kind, obj in kube.watch(
                resource, namespace=namespace, resource_version=rv, timeout_seconds=900
            ):
                rv = obj["metadata"].get("resourceVersion") or rv
                seen(kind, obj, time.perf_counter())
        except KubeError as exc:
            print(f"watch of {namespace} broke ({exc}); resuming", file=sys.stderr)


def _claim_seen(
    phases: dict[str, dict[str, float]], kind: str, obj: dict[str, Any], now: float
) -> None:
    meta = obj["metadata"]
    owners = [o["name"] for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"]
    if kind not in ("ADDED", "MODIFIED") or not owners:
        return
    _note(phases, "claim made", owners[0], now)
    if _PROTECTION in (meta.get("finalizers") or ()):
        _note(phases, "protected", owners[0], now)
    if (obj.get("status") or {}).get("allocation"):
        _note(phases, "allocated", owners[0], now)


async def steady_state(
    kube: KubeClient,
    namespace: str,
    body: Callable[[int], dict[str, Any]],
    count: int,
    duration_s: float,
    run: Run,
    phases: dict[str, dict[str, float]] | None = None,
) -> tuple[float, float]:
    """Run the op in ``namespace`` (pod ``i`` is ``body(i)``), recording sends and binds in
    ``run`` (and each pod's :data:`PHASES` in ``phases``, when given); returns the measured
    window (start, end) in ``time.perf_counter`` seconds."""
    seen = asyncio.Event()

    def pod_seen(kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if kind not in ("ADDED", "MODIFIED"):
            return
        if phases is not None and (obj.get("status") or {}).get("resourceClaimStatuses"):
            _note(phases, "named in the pod", name, now)
        if obj["spec"].get("nodeName") and name not in run.bound:
            run.bound[name] = now
            seen.set()

    listed = await kube.list(PODS, namespace=namespace, limit=1)
    watchers = [
        asyncio.create_task(_watch(kube, PODS, namespace, listed["resourceVersion"], pod_seen))
    ]
    if phases is not None:
        claims = await kube.list(RESOURCE_CLAIMS, namespace=namespace, limit=1)
        watchers.append(
            asyncio.create_task(
                _watch(
                    kube,
                    RESOURCE_CLAIMS,
                    namespace,
                    claims["resourceVersion"],
                    functools.partial(_claim_seen, phases),
                )
            )
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
        for watcher in watchers:
            watcher.cancel()
        for watcher in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    return start, start + duration_s
