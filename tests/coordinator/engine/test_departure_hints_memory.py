"""A pod waiting for room goes back to the queue when a bound pod leaves only if that pod may
help it, judged by the plugins that refused it (kube-scheduler's queueing hints on a Pod
delete): the holder of the host port it wants, of the resource it lacks, of a volume on a full
node, of the labels its anti-affinity shuns. Waking it for any other departure costs a cycle, a
FailedScheduling Event and a status write, and doubles its backoff. A GPU pod still wakes when
a GPU pod leaves. On the in-memory cluster, the loop driven by hand, its clock too."""

from __future__ import annotations

from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.queue import QueuedPod
from coordinator.engine.loop import Scheduler
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.attempts import attempt
from tests.support.clock import ManualClock
from tests.support.volumes import csi_node, csi_volume


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def cluster(clock: ManualClock) -> MemoryCluster:
    return MemoryCluster(Inventory(stale_ttl_s=3600, clock=clock))


@pytest.fixture
def runtime(cluster: MemoryCluster, clock: ManualClock) -> SchedulerRuntime:
    return memory_runtime(cluster.inventory, cluster, clock=clock)


def woken(scheduler: Scheduler, clock: ManualClock) -> QueuedPod | None:
    """The pod a change sent back, well before the queue's 60 s flush (``None``: none)."""
    clock.now += 20.0
    scheduler.changes.apply()
    return scheduler.queue.pop()


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("default", name)
    assert obj is not None
    return obj["spec"].get("nodeName")


async def placed(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock, obj: dict[str, Any]
) -> None:
    name = obj["metadata"]["name"]
    cluster.create_pod(obj)
    await attempt(runtime.scheduler, clock, name)
    assert node_of(cluster, name) is not None, f"{name} is not placed"


async def refused(
    cluster: MemoryCluster,
    runtime: SchedulerRuntime,
    clock: ManualClock,
    obj: dict[str, Any],
    why: str,
) -> None:
    name = obj["metadata"]["name"]
    cluster.create_pod(obj)
    await attempt(runtime.scheduler, clock, name)
    assert node_of(cluster, name) is None
    last = runtime.scheduler.last_attempt(f"default/{name}")
    assert last is not None
    assert why in last.message


async def retried_and_placed(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock, name: str
) -> None:
    entry = woken(runtime.scheduler, clock)
    assert entry is not None, f"{name} still waits"
    assert entry.key == f"default/{name}"
    await runtime.scheduler.schedule(entry)
    await runtime.scheduler.drain()
    assert node_of(cluster, name) == "n1"


def port_pod(name: str, port: int | None) -> dict[str, Any]:
    ports = [{"containerPort": 80, "hostPort": port}] if port else []
    return pod(name, cpu="100m", memory=None, ports=ports)


async def test_a_pod_refused_for_a_host_port_waits_for_the_pod_holding_it(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    await placed(cluster, runtime, clock, port_pod("holder", 8080))
    await placed(cluster, runtime, clock, port_pod("other-port", 8081))
    await placed(cluster, runtime, clock, port_pod("no-port", None))
    await refused(cluster, runtime, clock, port_pod("p", 8080), "free ports")

    cluster.delete_pod("default", "no-port")
    cluster.delete_pod("default", "other-port")
    assert woken(runtime.scheduler, clock) is None  # neither held 8080
    cluster.delete_pod("default", "holder")
    await retried_and_placed(cluster, runtime, clock, "p")


async def test_a_pod_refused_for_cpu_waits_for_a_pod_that_held_cpu(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    await placed(cluster, runtime, clock, pod("big", cpu="3", memory=None))
    await placed(cluster, runtime, clock, pod("cache", cpu=None, memory="2Gi"))
    await refused(cluster, runtime, clock, pod("p", cpu="2", memory=None), "Insufficient cpu")

    cluster.delete_pod("default", "cache")
    assert woken(runtime.scheduler, clock) is None  # it freed memory, which p does not ask
    cluster.delete_pod("default", "big")
    await retried_and_placed(cluster, runtime, clock, "p")


async def test_a_pod_refused_for_the_pod_count_waits_for_any_pod_to_leave(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "2"})
    await placed(cluster, runtime, clock, pod("a", cpu=None, memory="1Gi"))
    await placed(cluster, runtime, clock, pod("b", cpu=None, memory="1Gi"))
    await refused(cluster, runtime, clock, pod("p", cpu="1", memory=None), "Too many pods")

    cluster.delete_pod("default", "a")  # no cpu freed, but a pod's place
    await retried_and_placed(cluster, runtime, clock, "p")


def with_claim(name: str, claim_name: str | None) -> dict[str, Any]:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return pod(name, cpu="100m", memory=None, spec={"volumes": volumes} if claim_name else None)


async def test_a_pod_over_the_volume_limit_waits_for_a_pod_with_volumes(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    for name in ("held", "new"):
        for obj in csi_volume(name):
            cluster.volumes.apply(obj)
    cluster.volumes.apply(csi_node("n1", ebs=1))
    await placed(cluster, runtime, clock, with_claim("x", "held"))
    await placed(cluster, runtime, clock, with_claim("plain", None))
    await refused(cluster, runtime, clock, with_claim("p", "new"), "exceed max volume count")

    cluster.delete_pod("default", "plain")
    assert woken(runtime.scheduler, clock) is None  # it attached no volume
    cluster.delete_pod("default", "x")
    await retried_and_placed(cluster, runtime, clock, "p")


def _away_from(labels: dict[str, str]) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


async def test_a_pod_kept_away_by_its_anti_affinity_waits_for_the_pod_it_shuns(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    small = {"cpu": "100m", "memory": None}
    await placed(cluster, runtime, clock, pod("cache", labels={"app": "cache"}, **small))
    await placed(cluster, runtime, clock, pod("web", labels={"app": "web"}, **small))
    away = pod("p", affinity=_away_from({"app": "cache"}), **small)
    await refused(cluster, runtime, clock, away, "anti-affinity")

    cluster.delete_pod("default", "web")
    assert woken(runtime.scheduler, clock) is None  # its labels kept p away from nothing
    cluster.delete_pod("default", "cache")
    await retried_and_placed(cluster, runtime, clock, "p")


def _near(labels: dict[str, str], away: dict[str, str]) -> dict[str, Any]:
    def term(match: dict[str, str]) -> dict[str, Any]:
        return {"labelSelector": {"matchLabels": match}, "topologyKey": "kubernetes.io/hostname"}

    return {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(labels)]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(away)]},
    }


async def test_a_pod_leaving_that_its_affinity_matched_does_not_wake_it(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    """A departure can only take away a pod the waiting pod's affinity wants: it never helps."""
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    small = {"cpu": "100m", "memory": None}
    for name in ("web-a", "web-b"):
        await placed(cluster, runtime, clock, pod(name, labels={"tier": "front"}, **small))
    await placed(cluster, runtime, clock, pod("cache", labels={"app": "cache"}, **small))
    p = pod("p", affinity=_near({"tier": "front"}, {"app": "cache"}), **small)
    await refused(cluster, runtime, clock, p, "anti-affinity")

    cluster.delete_pod("default", "web-b")
    assert woken(runtime.scheduler, clock) is None  # one fewer pod it wants near it
    cluster.delete_pod("default", "cache")
    await retried_and_placed(cluster, runtime, clock, "p")  # web-a still runs there


async def test_a_pod_shunned_by_a_running_pod_waits_for_that_pod_not_for_any_pod_that_shuns(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    small = {"cpu": "100m", "memory": None}
    loner = pod("loner", labels={"app": "loner"}, affinity=_away_from({"app": "x"}), **small)
    await placed(cluster, runtime, clock, loner)
    guard = pod("guard", labels={"app": "guard"}, affinity=_away_from({"app": "p"}), **small)
    await placed(cluster, runtime, clock, guard)
    await refused(cluster, runtime, clock, pod("p", labels={"app": "p"}, **small), "anti-affinity")

    cluster.delete_pod("default", "loner")
    assert woken(runtime.scheduler, clock) is None  # its anti-affinity never selected p
    cluster.delete_pod("default", "guard")
    await retried_and_placed(cluster, runtime, clock, "p")


async def test_one_of_several_anti_affinity_terms_matched_by_the_pod_that_left_wakes(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    """One matching anti-affinity term refuses a node, so a pod matching one of them leaving
    may help (kube-scheduler v1.36.3 asks for all of them: kubernetes#139161)."""
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    small = {"cpu": "100m", "memory": None}
    await placed(cluster, runtime, clock, pod("cache", labels={"app": "cache"}, **small))
    terms = [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
        for app in ("cache", "db")
    ]
    away = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
    await refused(cluster, runtime, clock, pod("p", affinity=away, **small), "anti-affinity")

    cluster.delete_pod("default", "cache")
    await retried_and_placed(cluster, runtime, clock, "p")


async def test_a_gpu_pod_waits_for_a_gpu_pod_to_leave(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    cluster.add_node("n1", topology=discover_profile("dgx-h100", hostname="n1"))
    await placed(cluster, runtime, clock, pod("trainer", gpus=8))
    await refused(cluster, runtime, clock, pod("p", gpus=4), "nodes are available")

    cluster.delete_pod("default", "trainer")
    await retried_and_placed(cluster, runtime, clock, "p")


def waking(scheduler: Scheduler, clock: ManualClock) -> set[str]:
    """The names of every pod a change sent back (well before the queue's 60 s flush)."""
    clock.now += 20.0
    scheduler.changes.apply()
    names = set()
    while (entry := scheduler.queue.pop()) is not None:
        names.add(entry.key.split("/")[1])
    return names


async def test_a_pod_deleted_before_its_bind_was_seen_wakes_only_pods_it_may_help(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    """kube-scheduler sends an assumed pod it forgets through the Pod-delete hints; a pending
    pod deleted wakes no one."""
    cluster.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    scheduler = runtime.scheduler
    await placed(cluster, runtime, clock, pod("big", cpu="3", memory="1Gi"))
    cluster.create_pod(pod("cpu", cpu="2", memory=None))
    cluster.create_pod(pod("mem", cpu=None, memory="9Gi"))
    for _ in range(2):
        entry = scheduler.queue.pop()
        assert entry is not None
        await scheduler.schedule(entry)
    await scheduler.drain()
    for name, why in (("cpu", "Insufficient cpu"), ("mem", "Insufficient memory")):
        last = scheduler.last_attempt(f"default/{name}")
        assert last is not None
        assert why in last.message

    cluster.create_pod(pod("pending", cpu=None, memory="1Gi"))
    cluster.delete_pod("default", "pending")  # queued, never tried: it held nothing
    assert waking(scheduler, clock) == set()

    cluster.create_pod(pod("doomed", cpu=None, memory="1Gi"))
    entry = scheduler.queue.pop()
    assert entry is not None
    assert entry.key == "default/doomed"
    await scheduler.schedule(entry)  # assumed on n1, its bind not done yet
    assert scheduler.view.held(entry.uid) is not None
    cluster.delete_pod("default", "doomed")  # deleted before its bind was seen
    await scheduler.drain()  # its bind fails: nothing more to release
    assert scheduler.view.held(entry.uid) is None
    assert waking(scheduler, clock) == {"mem"}  # it held memory, and no cpu
