"""Bringing the KWOK benchmark's cluster to rest before a measured run: wait for the API server to
go quiet, warm KWOK up, clear a run's pods.

**The warm-up.** The first pods bound to freshly created KWOK Nodes bring pod LISTs and WATCHes
that neither scheduler makes and that come only once (benchmarks-history.md: KWOK taking up a Node's
pods), so they fell on whichever scheduler ran first. :func:`warm_up` makes the API requests a
scheduler's run makes, with no scheduler: as many pods as a run has (every Node gets one) are
created unbound, each bound through ``pods/binding`` and given a ``Scheduled`` Event, as fast as
the server takes them; it waits until KWOK has them all Running, deletes them and waits until
the API server is quiet again: the measured runs then start alike.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from benchmarks.apiserver_metrics import requests_total
from benchmarks.kwok_cluster import node_name
from common.kube import NAMESPACES, PODS, KubeClient
from devcluster.controlplane import ControlPlane

__all__ = ["WarmUp", "clear", "settle", "warm_up"]

WARM_UP_NAMESPACE = "kwok-warm-up"


def _cpu_seconds(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    except psutil.Error:
        return 0.0


async def settle(plane: ControlPlane, *, below: float = 0.15, limit_s: float = 180.0) -> float:
    """Wait until the API server is quiet: under ``below`` of a core over 3 s and no LIST of pods
    in that window, so that the load of thousands of Nodes turning Ready does not fall on the
    first scheduler's run; seconds waited (``limit_s`` at most)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        before = _cpu_seconds(plane.state.apiserver_pid)
        lists = (await asyncio.to_thread(requests_total, plane))["LIST", "pods", ""]
        await asyncio.sleep(3.0)
        busy = _cpu_seconds(plane.state.apiserver_pid) - before >= 3.0 * below
        listing = (await asyncio.to_thread(requests_total, plane))["LIST", "pods", ""] > lists
        if not busy and not listing:
            break
    return time.perf_counter() - t0


async def clear(kube: KubeClient, namespace: str) -> None:
    await kube.delete_collection(PODS, namespace=namespace, grace_period_seconds=0)
    while (await kube.list(PODS, namespace=namespace, limit=1))["items"]:  # noqa: ASYNC110
        await asyncio.sleep(0.2)


@dataclass(frozen=True, slots=True)
class WarmUp:
    pods: int
    running_s: float
    cleared_s: float
    quiet_s: float
    lists: int
    watches: int

    def summary(self) -> str:
        return (
            f"warm-up: {self.pods:,} pods created, bound and given an Event by the benchmark, "
            f"Running (KWOK) in {self.running_s:.1f}s, deleted in {self.cleared_s:.1f}s, API "
            f"server quiet {self.quiet_s:.1f}s after; meanwhile {self.lists:,} pod LISTs and "
            f"{self.watches:,} pod WATCHes"
        )


def _warm_pod(i: int, nodes: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"warm-{i:05d}", "labels": {"app": "kwok-warm-up"}},
        "spec": {
            "schedulerName": "kwok-warm-up",  # no scheduler serves it: the benchmark binds it
            "containers": [{"name": "main", "image": "registry.example/pause:1"}],
        },
    }


async def warm_up(
    plane: ControlPlane,
    kube: KubeClient,
    nodes: int,
    pods: int,
    *,
    timeout_s: float = 600.0,
    node: Callable[[int], str] = node_name,
) -> WarmUp:
    """``pods`` pods (at least one on each of ``nodes`` Nodes, the ``i``-th named ``node(i)``)
    until Running, then deleted (see the module doc)."""
    count = max(nodes, pods)
    before = await asyncio.to_thread(requests_total, plane)
    await kube.create(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WARM_UP_NAMESPACE}},
    )
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        async with sem:
            made = await kube.create(PODS, _warm_pod(i, nodes), namespace=WARM_UP_NAMESPACE)
            name = made["metadata"]["name"]
            target = node(i % nodes)
            await kube.bind(namespace=WARM_UP_NAMESPACE, pod=name, node=target)
            await kube.create_event(
                regarding=made,
                reason="Scheduled",
                message=f"Successfully assigned {WARM_UP_NAMESPACE}/{name} to {target}",
                component="kwok-warm-up",
            )

    await asyncio.gather(*(create(i) for i in range(count)))
    deadline = t0 + timeout_s
    while True:
        listed = await kube.list(PODS, namespace=WARM_UP_NAMESPACE, resource_version="0")
        running = sum(1 for p in listed["items"] if p.get("status", {}).get("phase") == "Running")
        if running >= count:
            break
        if time.perf_counter() > deadline:
            raise RuntimeError(f"warm-up: only {running}/{count} pods Running")
        await asyncio.sleep(1.0)
    running_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    await clear(kube, WARM_UP_NAMESPACE)
    cleared_s = time.perf_counter() - t1
    quiet_s = await settle(plane)
    after = await asyncio.to_thread(requests_total, plane)
    return WarmUp(
        pods=count,
        running_s=running_s,
        cleared_s=cleared_s,
        quiet_s=quiet_s,
        lists=after["LIST", "pods", ""] - before["LIST", "pods", ""],
        watches=after["WATCH", "pods", ""] - before["WATCH", "pods", ""],
    )
