"""PersistentVolumeClaims in the scheduling loop, over the in-memory cluster: a pod's
WaitForFirstConsumer claim gets ``volume.kubernetes.io/selected-node`` (or its matched local PV
the ``claimRef``) before the pod's Binding, on the node the pod is bound to; a PV taken since the
decision stops the bind and the pod is decided again onto another PV; a pod waiting for a missing
claim is placed once the claim appears; a pod refused for its node's CSI volume limit is tried
again when a pod with volumes there is deleted, the node's CSINode changes, or a
VolumeAttachment holding its slot is deleted (not when one is added or changed, nor for a pod
whose inline volumes are another driver's, nor when another pod's claim or PV is added)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.snapshot.volumes import ANN_SELECTED_NODE
from coordinator.engine.loop import Scheduler
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.attempts import attempt
from tests.support.clock import ManualClock
from tests.support.volumes import (
    ZONE,
    attachment,
    claim,
    csi_node,
    csi_volume,
    local_pv,
    storage_class,
)


@pytest.fixture
def cluster() -> MemoryCluster:
    cluster = MemoryCluster(Inventory())
    room = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    cluster.add_node("node-a", labels={ZONE: "z1"}, allocatable=room)
    cluster.add_node("node-b", labels={ZONE: "z2"}, allocatable=room)
    return cluster


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0)


@pytest.fixture
def runtime(cluster: MemoryCluster, clock: ManualClock) -> SchedulerRuntime:
    return memory_runtime(cluster.inventory, cluster, clock=clock)


def with_claim(name: str, claim_name: str) -> dict[str, Any]:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return pod(name, spec={"volumes": volumes})


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("default", name)
    assert obj is not None
    return obj["spec"].get("nodeName")


async def test_a_claim_to_provision_names_the_node_before_the_pod_is_bound(
    cluster: MemoryCluster,
    runtime: SchedulerRuntime,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scheduler = runtime.scheduler
    cluster.volumes.apply(storage_class("nvme", provisioner="rancher.io/local-path", zones=("z2",)))
    cluster.volumes.apply(claim("data", cls="nvme"))
    cluster.create_pod(with_claim("p", "data"))
    seen: list[str | None] = []
    bind = cluster.bind

    async def bind_watching(*args: Any) -> None:
        obj = cluster.volumes.get("PersistentVolumeClaim", "data", "default")
        assert obj is not None
        seen.append((obj["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE))
        await bind(*args)

    monkeypatch.setattr(cluster, "bind", bind_watching)
    await attempt(scheduler, clock, "p")
    assert seen == ["node-b"]
    assert node_of(cluster, "p") == "node-b"


async def test_a_pv_taken_since_the_decision_stops_the_bind_and_another_is_chosen(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    scheduler = runtime.scheduler
    cluster.volumes.apply(storage_class("local"))
    cluster.volumes.apply(claim("data"))
    cluster.volumes.apply(local_pv("pv-a", "node-a", size="20Gi"))
    cluster.volumes.apply(local_pv("pv-b", "node-b", size="200Gi"))
    cluster.create_pod(with_claim("p", "data"))
    real_bind = cluster.volumes.bind

    def taken_first(pod_ref: Any, writes: Any) -> None:
        # Another scheduler binds the PV this decision chose, just before our write.
        pv_name = writes.bind[0][0].name
        other = local_pv(pv_name, f"node-{pv_name.removeprefix('pv-')}", size="20Gi")
        other["spec"]["claimRef"] = {"namespace": "default", "name": "other", "uid": "x"}
        cluster.volumes.apply(other)
        cluster.volumes.bind = real_bind  # type: ignore[method-assign]
        real_bind(pod_ref, writes)

    cluster.volumes.bind = taken_first  # type: ignore[method-assign]
    await attempt(scheduler, clock, "p")
    assert node_of(cluster, "p") is None  # the bind was stopped
    assert scheduler.stats.bind_conflicts == 1
    taken = cluster.volumes.get("PersistentVolume", "pv-a")  # the first chosen: node-a by name
    assert taken is not None
    assert taken["spec"]["claimRef"]["name"] == "other"  # never given twice

    await attempt(scheduler, clock, "p")
    assert node_of(cluster, "p") == "node-b"
    pv = cluster.volumes.get("PersistentVolume", "pv-b")
    assert pv is not None
    assert pv["spec"]["claimRef"]["name"] == "data"
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"


async def test_a_pod_waiting_for_its_claim_is_placed_once_the_claim_appears(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    scheduler = runtime.scheduler
    cluster.create_pod(with_claim("p", "data"))
    await attempt(scheduler, clock, "p")
    assert node_of(cluster, "p") is None
    last = scheduler.last_attempt("default/p")
    assert last is not None
    assert 'persistentvolumeclaim "data" not found' in last.message

    cluster.volumes.apply(claim("data", volume="pv-a", bound=True))
    cluster.volumes.apply(local_pv("pv-a", "node-a", claim_ref=("data", "")))
    await attempt(scheduler, clock, "p")
    assert node_of(cluster, "p") == "node-a"


async def woken(scheduler: Scheduler, clock: ManualClock, name: str) -> None:
    """The pod's next attempt well before the queue's 60 s flush: only a change moves it."""
    clock.now += 20.0
    scheduler.changes.apply()
    entry = scheduler.queue.pop()
    assert entry is not None, f"{name} still waits"
    assert entry.key == f"default/{name}"
    await scheduler.schedule(entry)
    await scheduler.drain()


async def test_a_pod_over_the_volume_limit_waits_for_a_pod_deleted_or_the_csinode_changed(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    scheduler = runtime.scheduler
    for name in ("a1", "b1", "new", "later"):
        for obj in csi_volume(name):
            cluster.volumes.apply(obj)
    cluster.volumes.apply(csi_node("node-a", ebs=1))
    cluster.volumes.apply(csi_node("node-b", ebs=1))
    for name, claim_name in (("x", "a1"), ("y", "b1")):
        cluster.create_pod(with_claim(name, claim_name))
        await attempt(scheduler, clock, name)
    x_node = node_of(cluster, "x")
    assert {x_node, node_of(cluster, "y")} == {"node-a", "node-b"}

    cluster.create_pod(with_claim("p", "new"))
    await attempt(scheduler, clock, "p")
    assert node_of(cluster, "p") is None
    last = scheduler.last_attempt("default/p")
    assert last is not None
    assert "0/2 nodes are available: 2 node(s) exceed max volume count." in last.message
    clock.now += 20.0
    scheduler.changes.apply()
    assert scheduler.queue.pop() is None  # nothing changed: it waits
    for obj in csi_volume("someone-elses"):  # another pod's claim and PV: no slot freed
        cluster.volumes.apply(obj)
    clock.now += 20.0
    scheduler.changes.apply()
    assert scheduler.queue.pop() is None

    assert cluster.delete_pod("default", "x")
    await woken(scheduler, clock, "p")
    assert node_of(cluster, "p") == x_node

    cluster.create_pod(with_claim("q", "later"))
    await attempt(scheduler, clock, "q")
    assert node_of(cluster, "q") is None
    cluster.volumes.apply(csi_node("node-b", ebs=2))
    await woken(scheduler, clock, "q")
    assert node_of(cluster, "q") == "node-b"


async def test_a_pod_over_the_volume_limit_waits_for_a_volume_attachment_deleted(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    scheduler = runtime.scheduler
    for name in ("old-a", "old-b", "new"):
        for obj in csi_volume(name):
            cluster.volumes.apply(obj)
    for node in ("node-a", "node-b"):  # each node's only slot held by a volume still attached
        cluster.volumes.apply(csi_node(node, ebs=1, **{"pd.csi.storage.gke.io": 0}))
        cluster.volumes.apply(attachment(f"va-{node}", node, f"pv-old-{node[-1]}"))
    cluster.create_pod(with_claim("p", "new"))
    inline = {"name": "disk", "gcePersistentDisk": {"pdName": "d1"}}  # no room for its driver
    cluster.create_pod(pod("g", spec={"volumes": [inline]}))
    clock.now += 60.0
    scheduler.changes.apply()
    for name in ("p", "g"):
        entry = scheduler.queue.pop()
        assert entry is not None
        assert entry.key == f"default/{name}"
        await scheduler.schedule(entry)
        await scheduler.drain()
        assert node_of(cluster, name) is None
        last = scheduler.last_attempt(f"default/{name}")
        assert last is not None
        assert "0/2 nodes are available: 2 node(s) exceed max volume count." in last.message

    cluster.volumes.apply(attachment("va-other", "node-b", "pv-new"))  # added: wakes no one
    clock.now += 5.0
    scheduler.changes.apply()
    assert scheduler.queue.pop() is None

    cluster.volumes.delete("VolumeAttachment", "va-other")
    cluster.volumes.delete("VolumeAttachment", "va-node-b")  # detached: node-b's slot is free
    clock.now += 5.0
    scheduler.changes.apply()
    entry = scheduler.queue.pop()
    assert entry is not None
    assert entry.key == "default/p"
    await scheduler.schedule(entry)
    await scheduler.drain()
    assert node_of(cluster, "p") == "node-b"
    assert scheduler.queue.pop() is None  # g's inline GCE PD is another driver's: not woken


async def test_a_pod_whose_inline_volume_is_over_the_limit_waits_for_the_csinode_to_change(
    cluster: MemoryCluster, runtime: SchedulerRuntime, clock: ManualClock
) -> None:
    scheduler = runtime.scheduler
    for node in ("node-a", "node-b"):
        cluster.volumes.apply(csi_node(node, ebs=0))
    inline = {"name": "disk", "awsElasticBlockStore": {"volumeID": "vol-1"}}
    cluster.create_pod(pod("p", spec={"volumes": [inline]}))
    await attempt(scheduler, clock, "p")
    last = scheduler.last_attempt("default/p")
    assert last is not None
    assert "0/2 nodes are available: 2 node(s) exceed max volume count." in last.message
    cluster.volumes.apply(csi_node("node-a", ebs=1))
    await woken(scheduler, clock, "p")
    assert node_of(cluster, "p") == "node-a"
