"""Room freed by preemption is held for the preemptor while its victims terminate (on the
in-memory cluster, where evicted pods linger until the test ends them): a lower-priority pod
arriving meanwhile cannot take it, a higher-priority one can, the hold ends when the preemptor is
deleted, and a nomination left on a pending pod by an earlier coordinator is honoured. A share
holds its room on one GPU: the one its victims free."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.gangs.cycle import schedule_gang
from coordinator.core.queue import QueueSettings, SchedulingQueue
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import RuntimeSettings
from coordinator.engine.nominations import Nominations
from coordinator.engine.ports import ClusterError, PodRef
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually
from tests.support.sched_hw import gpu_node, pcie8, plain_node, request, running


class LingeringCluster(MemoryCluster):
    """Evicted pods stay (Terminating) until :meth:`terminate`."""

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.evicted: list[str] = []

    async def evict(self, pod: PodRef) -> None:
        self.evicted.append(pod.key)

    def terminate(self) -> None:
        for key in self.evicted:
            ns, _, name = key.partition("/")
            self.delete_pod(ns, name)
        self.evicted.clear()


@contextlib.asynccontextmanager
async def lingering(
    kind: type[LingeringCluster] = LingeringCluster,
    nodes: tuple[str, ...] = ("dgx-a",),
    *,
    queue: QueueSettings | None = None,
    planner: Any = None,
) -> AsyncIterator[tuple[LingeringCluster, SchedulerRuntime]]:
    """A running scheduler with the gang runtime over a ``kind`` cluster of DGX H100 ``nodes``
    (``queue``: its queue's settings; ``planner``: the gang planner, default the real one)."""
    inventory = Inventory(stale_ttl_s=3600)
    memory = kind(inventory)
    for name in nodes:
        memory.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    settings = RuntimeSettings(queue=queue) if queue is not None else None
    runtime = memory_runtime(inventory, memory, settings=settings)
    extra = {} if planner is None else {"planner": planner}
    gangs = GangRuntime(
        runtime, settings=GangSettings(tick_s=0.05), nominate=memory.nominate, **extra
    )
    async with runtime, gangs:
        yield memory, runtime


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[LingeringCluster, SchedulerRuntime]]:
    async with lingering() as running:
        yield running


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("default", name)
    assert obj is not None
    node: str | None = obj["spec"].get("nodeName")
    return node


def message_of(cluster: MemoryCluster, name: str) -> str:
    obj = cluster.pod("default", name)
    assert obj is not None
    conditions = obj["status"].get("conditions") or [{}]
    return str(conditions[-1].get("message", ""))


async def preempted(cluster: LingeringCluster, runtime: SchedulerRuntime) -> None:
    """``filler`` (priority 0) holds 6 of dgx-a's 8 GPUs; ``urgent`` (priority 100) wants all 8
    and evicts it; the eviction lingers."""
    cluster.create_pod(pod("filler", gpus=6, priority=0))
    await eventually(lambda: node_of(cluster, "filler"), what="filler bound", timeout_s=10)
    cluster.create_pod(pod("urgent", gpus=8, priority=100))
    await eventually(lambda: cluster.evicted, what="the eviction", timeout_s=10)
    await runtime.settle()
    urgent = cluster.pod("default", "urgent")
    assert urgent is not None
    assert urgent["status"].get("nominatedNodeName") == "dgx-a"


async def test_a_lower_priority_pod_cannot_take_the_room_while_victims_terminate(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    await preempted(memory, runtime)
    # Two GPUs are free on dgx-a, but they are the preemptor's: a later, lower pod waits.
    memory.create_pod(pod("late", gpus=2, priority=0))
    await runtime.settle()
    assert node_of(memory, "late") is None
    assert "Insufficient nvidia.com/gpu" in message_of(memory, "late")
    memory.terminate()  # the victim is gone: the preemptor binds where it was nominated
    await eventually(lambda: node_of(memory, "urgent"), what="urgent bound", timeout_s=10)
    assert node_of(memory, "urgent") == "dgx-a"
    await runtime.settle()
    assert node_of(memory, "late") is None
    assert len(runtime.scheduler.nominations) == 0


async def test_a_preemptor_retried_while_its_victims_terminate_evicts_no_more(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    # kube-scheduler's rule: a pod nominated where lower-priority pods are still terminating is
    # not eligible to preempt again. Here a node with a victim to offer appears meanwhile (every
    # waiting pod is retried): the preemptor waits for its own victim instead of evicting there.
    memory, runtime = cluster
    await preempted(memory, runtime)
    memory.add_node("dgx-b", topology=discover_profile("dgx-h100", hostname="dgx-b"))
    memory.create_pod(pod("other", gpus=8, priority=0, node="dgx-b"))
    runtime.scheduler.queue.cluster_changed()
    await runtime.settle()
    attempts = runtime.scheduler.stats.attempts
    runtime.scheduler.queue.cluster_changed()
    await eventually(
        lambda: runtime.scheduler.stats.attempts > attempts, what="a retry", timeout_s=10
    )
    await runtime.settle()
    assert memory.evicted == ["default/filler"]
    # while its victim goes it keeps the words it was told when the victim was evicted
    waiting = "preempting 1 lower-priority pod: default/urgent preempts default/filler"
    assert waiting in message_of(memory, "urgent")
    memory.terminate()
    await eventually(lambda: node_of(memory, "urgent"), what="urgent bound", timeout_s=10)
    assert node_of(memory, "urgent") == "dgx-a"
    assert node_of(memory, "other") == "dgx-b"


async def test_a_higher_priority_pod_may_take_the_held_room(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    await preempted(memory, runtime)
    memory.create_pod(pod("vip", gpus=2, priority=1000))
    await eventually(lambda: node_of(memory, "vip"), what="vip bound", timeout_s=10)
    assert node_of(memory, "vip") == "dgx-a"


async def test_the_hold_ends_when_the_preemptor_is_deleted(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    await preempted(memory, runtime)
    memory.create_pod(pod("late", gpus=2, priority=0))
    await runtime.settle()
    assert node_of(memory, "late") is None
    memory.delete_pod("default", "urgent")
    # Retried at once (not after the 60 s unschedulable flush), while the victim still lingers.
    await eventually(lambda: node_of(memory, "late"), what="late bound", timeout_s=5)
    assert len(runtime.scheduler.nominations) == 0


async def test_a_nomination_found_on_a_pending_pod_is_honoured() -> None:
    """After a restart the API server is the record: a pending pod that carries
    ``status.nominatedNodeName`` holds that room, though this coordinator preempted nothing."""
    inventory = Inventory(stale_ttl_s=3600)
    memory = MemoryCluster(inventory)
    memory.add_node("dgx-a", topology=discover_profile("dgx-h100", hostname="dgx-a"))
    memory.create_pod(pod("filler", gpus=6, priority=0, scheduler="other", node="dgx-a"))
    nominated = pod("urgent", gpus=8, priority=100)
    nominated["status"] = {"phase": "Pending", "nominatedNodeName": "dgx-a"}
    memory.create_pod(nominated)
    memory.create_pod(pod("late", gpus=2, priority=0))
    memory.create_pod(pod("peer", gpus=2, priority=100))  # equal priority: held out too
    async with memory_runtime(inventory, memory) as runtime:
        await runtime.settle()
        assert node_of(memory, "late") is None
        assert node_of(memory, "peer") is None
        memory.create_pod(pod("vip", gpus=2, priority=1000))
        await runtime.settle()
        assert node_of(memory, "vip") == "dgx-a"


def test_the_api_server_decides_when_a_nomination_is_cleared() -> None:
    queue = SchedulingQueue()
    nominations = Nominations(queue, held=lambda uid: False)
    obj: dict[str, Any] = pod("urgent", gpus=8, priority=100, uid="uid-urgent")
    obj["status"] = {"phase": "Pending", "nominatedNodeName": "dgx-a"}
    queue.add(obj)
    assert nominations.node_of("uid-urgent") == "dgx-a"
    cleared = copy.deepcopy(obj)
    del cleared["status"]["nominatedNodeName"]
    queue.add(cleared)  # someone cleared it on the API server
    assert nominations.node_of("uid-urgent") is None
    # Nominated here; an update from before our status patch does not undo it…
    entry = queue.named("default/urgent")
    assert entry is not None
    assert not isinstance(entry.request, Exception)
    nominations.nominate(entry.request, "dgx-b")
    queue.add(copy.deepcopy(cleared))
    assert nominations.node_of("uid-urgent") == "dgx-b"
    # …and a pod recreated under the same name holds nothing.
    queue.add(pod("urgent", gpus=8, priority=100, uid="uid-urgent-2"))
    assert nominations.node_of("uid-urgent") is None
    assert len(nominations) == 0


async def test_a_gang_preemptor_holds_the_room_of_every_member() -> None:
    async with lingering(nodes=("dgx-a", "dgx-b")) as (memory, runtime):
        for k in range(2):
            memory.create_pod(pod(f"filler-{k}", gpus=6, priority=0))
        await eventually(
            lambda: all(node_of(memory, f"filler-{k}") for k in range(2)), what="fillers bound"
        )
        for k in range(2):
            memory.create_pod(pod(f"train-{k}", gpus=8, priority=100, gang=("train", 2)))
        await eventually(lambda: len(memory.evicted) == 2, what="both fillers evicted")
        memory.create_pod(pod("late", gpus=2, priority=0))
        await runtime.settle()
        held = {n.key: n.node for n in runtime.scheduler.nominations.all()}
        assert held == {"default/train-0": "dgx-a", "default/train-1": "dgx-b"} or held == {
            "default/train-0": "dgx-b",
            "default/train-1": "dgx-a",
        }
        assert node_of(memory, "late") is None
        memory.terminate()
        await eventually(
            lambda: all(node_of(memory, f"train-{k}") for k in range(2)), what="gang bound"
        )
        assert {node_of(memory, f"train-{k}") for k in range(2)} == {"dgx-a", "dgx-b"}
        await runtime.settle()
        assert node_of(memory, "late") is None
        assert len(runtime.scheduler.nominations) == 0


async def test_a_higher_priority_preemptor_takes_the_node_from_a_lower_nomination(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    for k in range(2):
        memory.create_pod(pod(f"filler-{k}", gpus=4, priority=0))
    await eventually(
        lambda: all(node_of(memory, f"filler-{k}") for k in range(2)), what="fillers bound"
    )
    memory.create_pod(pod("middle", gpus=4, priority=50))
    await eventually(lambda: len(memory.evicted) == 1, what="middle's preemption")
    await runtime.settle()
    assert runtime.scheduler.nominations.node_of(uid_of(memory, "middle")) == "dgx-a"
    memory.create_pod(pod("urgent", gpus=4, priority=100))  # does not count middle's hold
    await eventually(lambda: len(memory.evicted) == 2, what="urgent's preemption")
    await runtime.settle()
    held = {n.key: n.node for n in runtime.scheduler.nominations.all()}
    assert held == {"default/urgent": "dgx-a"}
    middle = memory.pod("default", "middle")
    assert middle is not None
    assert "nominatedNodeName" not in middle["status"]


def uid_of(cluster: MemoryCluster, name: str) -> str:
    obj = cluster.pod("default", name)
    assert obj is not None
    return str(obj["metadata"]["uid"])


def share(name: str, fraction: str, priority: int) -> dict[str, Any]:
    return pod(name, priority=priority, annotations={"topos.io/gpu-fraction": fraction})


async def test_a_nominated_share_holds_its_room_on_the_gpu_its_victims_free(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    """One GPU of dgx-a is shared: a 0.5 that stays and two lower 0.25s. ``urgent`` (a 0.5)
    evicts both quarters; while the second still terminates, the quarter the first left is
    urgent's, not a later quarter's (which would have made urgent preempt again)."""
    memory, runtime = cluster
    memory.create_pod(pod("big", gpus=7, priority=1000))
    await eventually(lambda: node_of(memory, "big"), what="big bound", timeout_s=10)
    memory.create_pod(share("keeper", "0.5", 1000))
    for name in ("low-a", "low-b"):
        memory.create_pod(share(name, "0.25", 0))
    bound = ("keeper", "low-a", "low-b")
    await eventually(lambda: all(node_of(memory, n) for n in bound), what="shares bound")
    memory.create_pod(share("urgent", "0.5", 100))
    await eventually(lambda: len(memory.evicted) == 2, what="urgent's preemption", timeout_s=10)
    await runtime.settle()
    assert sorted(memory.evicted) == ["default/low-a", "default/low-b"]
    memory.evicted.remove("default/low-b")  # low-b lingers; low-a is gone
    memory.terminate()
    memory.evicted.append("default/low-b")
    memory.create_pod(share("late", "0.25", 0))
    await runtime.settle()
    assert node_of(memory, "late") is None
    assert "no GPU with room" in message_of(memory, "late")
    memory.terminate()
    await eventually(lambda: node_of(memory, "urgent"), what="urgent bound", timeout_s=10)
    await runtime.settle()
    assert node_of(memory, "late") is None
    assert memory.evicted == []  # nobody else was preempted
    assert len(runtime.scheduler.nominations) == 0


def test_a_share_nominated_by_the_api_server_alone_holds_a_gpu_with_room() -> None:
    """After a restart the plan's GPU is unknown: the share holds one with room for it now, and
    its ``nvidia.com/gpu: 1`` (a replica) holds no whole GPU."""
    topo = pcie8("h", memory_mib=80 * 1024)
    holders = [
        running(pod(f"w{i}", gpus=1, annotations={"topos.io/assigned-gpus": g.uuid}))
        for i, g in enumerate(topo.gpus[:6])
    ]
    half = {"topos.io/assigned-gpus": topo.gpus[6].uuid, "topos.io/gpu-share": "fraction=0.5"}
    holders.append(running(pod("half", annotations=half)))
    snapshot = Snapshot([gpu_node("h", topo, pods=holders)])
    queue = SchedulingQueue()
    nominations = Nominations(queue, held=lambda uid: False)
    ann = {"topos.io/gpu-fraction": "0.5"}
    obj: dict[str, Any] = pod("urgent", gpus=1, priority=100, uid="u1", annotations=ann)
    obj["status"] = {"phase": "Pending", "nominatedNodeName": "h"}
    queue.add(obj)
    node = nominations.overlay(snapshot, 0).get("h")
    assert node is not None
    assert node.share_room.get(6) is None  # the half GPU 6 had free is urgent's
    assert node.free_whole_gpus == 1  # GPU 7 is still whole
    assert nominations.overlay(snapshot, 1000) is snapshot  # a higher pod sees it all


def test_the_overlay_kept_between_attempts_follows_the_cluster_and_the_nominations() -> None:
    """The overlay is built once and shared while nothing changes, and made again from the last
    one when something does: a node changed, a pod assumed or forgotten in the snapshot, a
    nomination made or ended, or another pod's own nomination left out each give what a fresh
    build gives."""
    snapshot = Snapshot([plain_node(f"n{i}", cpu=4) for i in range(8)])
    queue = SchedulingQueue()
    nominations = Nominations(queue, held=lambda uid: False)
    high = [request(pod(f"high-{i}", cpu="3", priority=10, uid=f"u{i}")) for i in range(3)]
    held = {"u0": (high[0], "n0")}
    nominations.nominate(high[0], "n0")

    def used(view: Snapshot, node: str) -> int:
        found = view.get(node)
        assert found is not None
        return found.requested.get("cpu", 0)

    def as_fresh(view: Snapshot, exclude: frozenset[str] = frozenset()) -> Snapshot:
        other = Nominations(SchedulingQueue(), held=lambda uid: False)
        for req, node in held.values():
            other.nominate(req, node)
        expected = other.overlay(snapshot, 0, exclude)
        for node in expected.nodes:
            got = view.get(node.name)
            assert got is not None
            assert got.requested == node.requested, node.name
            assert [p.key for p in got.pods] == [p.key for p in node.pods], node.name
        for key in ("default/new", "default/low"):
            assert view.is_assumed(key) == expected.is_assumed(key)
        return view

    first = as_fresh(nominations.overlay(snapshot, 0))
    assert used(first, "n0") == 3000
    assert used(first, "n1") == 0
    assert nominations.overlay(snapshot, 0) is first  # nothing changed: the same one
    own = nominations.overlay(snapshot, 0, {"u0"})  # the preemptor's own view
    assert used(as_fresh(own, frozenset({"u0"})), "n0") == 0
    assert nominations.overlay(snapshot, 0) is first

    n0 = snapshot.get("n0")
    assert n0 is not None
    snapshot.replace(n0.adding((running(pod("low", cpu="900m", priority=0)),)))
    after = as_fresh(nominations.overlay(snapshot, 0))
    assert after is not first
    assert used(after, "n0") == 3900
    assert used(snapshot, "n0") == 900  # the snapshot itself holds no nomination
    assert used(first, "n0") == 3000  # an overlay handed out does not change

    nominations.nominate(high[1], "n1")
    held["u1"] = (high[1], "n1")
    as_fresh(nominations.overlay(snapshot, 0))
    snapshot.assume(request(pod("new", cpu="1", uid="n")), "n2", Placement())
    assumed = as_fresh(nominations.overlay(snapshot, 0))
    assert assumed.is_assumed("default/new")
    assert used(assumed, "n2") == 1000
    nominations.nominate(high[2], "n2")
    held["u2"] = (high[2], "n2")
    assert used(as_fresh(nominations.overlay(snapshot, 0)), "n2") == 4000
    snapshot.forget("default/new")
    forgotten = as_fresh(nominations.overlay(snapshot, 0))
    assert not forgotten.is_assumed("default/new")
    assert used(forgotten, "n2") == 3000
    nominations.drop("u0")
    del held["u0"]
    assert used(as_fresh(nominations.overlay(snapshot, 0)), "n0") == 900
    nominations.drop("u1")
    del held["u1"]
    assert used(as_fresh(nominations.overlay(snapshot, 0)), "n1") == 0
    assert nominations.overlay(snapshot, 11) is snapshot  # above every nomination: as it is


async def test_a_victim_that_never_goes_is_evicted_again_only_once_its_eviction_expired() -> None:
    """A victim whose eviction was accepted but which stays (here it lingers) is not evicted
    twice while its preemptor's nomination lasts (60 s on the engine's clock); after that the
    preemptor may pick it again, and it no longer counts as being evicted (background
    compaction waits while any pod does)."""
    now = [1000.0]
    inventory = Inventory(stale_ttl_s=3600)
    memory = LingeringCluster(inventory)
    memory.add_node("dgx-a", topology=discover_profile("dgx-h100", hostname="dgx-a"))
    runtime = memory_runtime(inventory, memory)
    gangs = GangRuntime(
        runtime, settings=GangSettings(tick_s=0.05), nominate=memory.nominate, clock=lambda: now[0]
    )
    async with runtime, gangs:
        preemptor = gangs.preemptor
        assert preemptor is not None
        filler = memory.create_pod(pod("filler", gpus=8, priority=0, scheduler=None, node="dgx-a"))
        await runtime.settle()
        memory.create_pod(pod("urgent", gpus=8, priority=100))
        await eventually(
            lambda: memory.evicted == ["default/filler"], what="filler evicted", timeout_s=10
        )
        # urgent tried again (as the queue's unschedulable flush would, or a change that helps)
        runtime.scheduler.queue.cluster_changed()
        await runtime.settle()
        assert memory.evicted == ["default/filler"]
        assert set(preemptor.evicting) == {filler["metadata"]["uid"]}
        now[0] += 61
        await eventually(lambda: not preemptor.evicting, what="the eviction expired", timeout_s=10)
        runtime.scheduler.queue.cluster_changed()
        await eventually(
            lambda: memory.evicted == ["default/filler"] * 2,
            what="filler evicted again",
            timeout_s=10,
        )


async def test_a_victim_re_created_under_its_name_is_a_pod_preemption_may_evict() -> None:
    """A victim deleted and re-applied under the same name while its eviction still counts
    (within the preemptor's nomination, 60 s) is another pod: the next higher-priority pod
    preempts it at once, instead of waiting out the old pod's eviction."""
    async with lingering() as (memory, runtime):
        memory.create_pod(pod("filler", gpus=8, priority=0, scheduler=None, node="dgx-a"))
        await runtime.settle()
        memory.create_pod(pod("urgent-1", gpus=8, priority=100))
        await eventually(
            lambda: memory.evicted == ["default/filler"], what="filler evicted", timeout_s=10
        )
        memory.terminate()
        await eventually(lambda: node_of(memory, "urgent-1"), what="urgent-1 bound", timeout_s=10)
        memory.delete_pod("default", "urgent-1")
        memory.create_pod(pod("filler", gpus=8, priority=0, scheduler=None, node="dgx-a"))
        await runtime.settle()
        memory.create_pod(pod("urgent-2", gpus=8, priority=100))
        await eventually(
            lambda: memory.evicted == ["default/filler"],
            what="the re-created filler evicted",
            timeout_s=10,
        )
        memory.terminate()
        await eventually(lambda: node_of(memory, "urgent-2"), what="urgent-2 bound", timeout_s=10)


async def test_a_gang_binds_as_soon_as_its_victims_are_gone_not_after_its_backoff() -> None:
    """KAI's reclaim case in small: a gang filling the cluster over lower-priority pods. Its
    members tried and failed while the victims terminated, so each sits out a backoff (here
    an hour); once the last victim is gone the gang goes at once."""
    hour = QueueSettings(initial_backoff_s=3600, max_backoff_s=3600)
    async with lingering(nodes=("dgx-a", "dgx-b"), queue=hour) as (memory, runtime):
        await big_gang_over_fillers(memory, runtime)
        assert node_of(memory, "big-0") is None  # the victims still hold the GPUs
        memory.terminate()
        await eventually(
            lambda: node_of(memory, "big-0") and node_of(memory, "big-1"),
            what="the gang bound without waiting out its hour of backoff",
            timeout_s=10,
        )
        assert {node_of(memory, "big-0"), node_of(memory, "big-1")} == {"dgx-a", "dgx-b"}


async def test_a_gang_waits_for_its_victims_without_being_planned_or_told_again() -> None:
    """While the pods a gang preempted are leaving, each one's going retries its members: they
    keep the words they were told when the victims were evicted (no new condition, no new
    FailedScheduling Event per member at each victim's going) and the gang is not planned again
    until the last victim is gone; then it binds."""
    quick = QueueSettings(initial_backoff_s=0.01, max_backoff_s=0.01)
    plans: list[int] = []

    def planner(*args: Any, **kwargs: Any) -> Any:
        plans.append(1)
        return schedule_gang(*args, **kwargs)

    nodes = ("dgx-a", "dgx-b")
    async with lingering(nodes=nodes, queue=quick, planner=planner) as (memory, runtime):
        await big_gang_over_fillers(memory, runtime)
        told = message_of(memory, "big-0")
        assert "preempting 2 lower-priority pods" in told, told
        failed = [e for e in memory.events("default", "big-0") if e["reason"] == "FailedScheduling"]
        planned = len(plans)
        last = runtime.scheduler.last_attempt("default/big-0")
        memory.delete_pod("default", "f-a")  # one victim gone, the other still terminating
        await eventually(
            lambda: runtime.scheduler.last_attempt("default/big-0") is not last,
            what="the member tried again after a victim went",
            timeout_s=10,
        )
        await runtime.settle()
        assert node_of(memory, "big-0") is None  # f-b still holds dgx-b
        assert message_of(memory, "big-0") == told
        again = [e for e in memory.events("default", "big-0") if e["reason"] == "FailedScheduling"]
        assert len(again) == len(failed)
        assert len(plans) == planned  # answered without planning the gang again
        memory.terminate()
        await eventually(
            lambda: node_of(memory, "big-0") and node_of(memory, "big-1"),
            what="the gang bound once its last victim was gone",
            timeout_s=10,
        )


async def test_a_victim_the_api_server_keeps_is_told_nothing() -> None:
    """The eviction goes first, the victim's ``Preempted`` Event after it: a victim whose
    eviction the API server refuses (a PodDisruptionBudget's 429) keeps running and is not told
    it was preempted; the preemptor still waits for its room."""

    class Refusing(LingeringCluster):
        async def evict(self, pod: PodRef) -> None:
            self.evicted.append(pod.key)
            raise ClusterError(f"evict {pod.key}: 429 Too Many Requests (disruption budget)")

    async with lingering(Refusing) as (memory, runtime):
        memory.create_pod(pod("low", gpus=8, priority=0, scheduler=None, node="dgx-a"))
        memory.create_pod(pod("urgent", gpus=8, priority=100))
        await eventually(lambda: memory.evicted == ["default/low"], what="the eviction asked")
        await runtime.settle()
        assert memory.pod("default", "low") is not None
        assert not [e for e in memory.events("default", "low") if e["reason"] == "Preempted"]
        assert node_of(memory, "urgent") is None


async def test_events_wait_while_the_evictions_are_on_the_wire() -> None:
    """Evictions go first, the nomination with them: while one is unanswered, the preemptor's
    ``nominatedNodeName`` is written but its ``Preempting`` Event and its explanation wait; they
    are written once the API server has answered."""
    answer = asyncio.Event()

    class Slow(LingeringCluster):
        async def evict(self, pod: PodRef) -> None:
            self.evicted.append(pod.key)
            await answer.wait()

    async with lingering(Slow) as (memory, _):
        memory.create_pod(pod("low", gpus=8, priority=0, scheduler=None, node="dgx-a"))
        memory.create_pod(pod("urgent", gpus=8, priority=100))
        await eventually(lambda: memory.evicted == ["default/low"], what="the eviction asked")
        await eventually(
            lambda: (memory.pod("default", "urgent") or {})["status"].get("nominatedNodeName"),
            what="the nomination while the eviction is on the wire",
        )
        for _ in range(20):
            await asyncio.sleep(0)  # every write queued so far has had its turn
        assert not memory.events("default", "urgent")
        answer.set()
        await eventually(
            lambda: any(e["reason"] == "Preempting" for e in memory.events("default", "urgent")),
            what="the Preempting Event once the eviction was answered",
        )


async def big_gang_over_fillers(memory: LingeringCluster, runtime: SchedulerRuntime) -> None:
    """A 2-member gang of 8-GPU pods over a low-priority 8-GPU pod on each of ``dgx-a`` and
    ``dgx-b``; returns once both fillers are evicted and the scheduler settled."""
    for name, node in (("f-a", "dgx-a"), ("f-b", "dgx-b")):
        memory.create_pod(pod(name, gpus=8, priority=0, scheduler=None, node=node))
    for k in range(2):
        memory.create_pod(pod(f"big-{k}", gpus=8, priority=100, gang=("big", 2)))
    await eventually(lambda: len(memory.evicted) == 2, what="both evictions", timeout_s=10)
    await runtime.settle()


def failed_scheduling(cluster: MemoryCluster, name: str) -> list[str]:
    return [
        e["message"] for e in cluster.events("default", name) if e["reason"] == "FailedScheduling"
    ]


async def test_a_preemptor_is_nominated_and_told_why_in_one_status_write(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    # kube-scheduler's one pods/status patch for a pod whose preemption succeeded: the nominated
    # node and PodScheduled=False together; the FailedScheduling Event follows on its own.
    memory, runtime = cluster
    await preempted(memory, runtime)
    urgent = memory.pod("default", "urgent")
    assert urgent is not None
    assert urgent["status"]["nominatedNodeName"] == "dgx-a"
    said = "preempting 1 lower-priority pod: default/urgent preempts default/filler"
    assert said in message_of(memory, "urgent")
    assert memory.status_writes["default/urgent"] == 1
    assert any(said in m for m in failed_scheduling(memory, "urgent"))
    # Retried while its victim goes: told nothing new, no second write.
    runtime.scheduler.queue.cluster_changed()
    await runtime.settle()
    assert memory.status_writes["default/urgent"] == 1
    memory.terminate()
    await eventually(lambda: node_of(memory, "urgent"), what="urgent bound", timeout_s=10)
    assert memory.status_writes["default/urgent"] == 1


async def test_every_gang_member_is_nominated_and_told_why_in_one_status_write() -> None:
    async with lingering(nodes=("dgx-a", "dgx-b")) as (memory, runtime):
        await big_gang_over_fillers(memory, runtime)
        for k in range(2):
            member = memory.pod("default", f"big-{k}")
            assert member is not None
            assert member["status"]["nominatedNodeName"] in ("dgx-a", "dgx-b")
            assert "preempting 2 lower-priority pods" in message_of(memory, f"big-{k}")
            assert memory.status_writes[f"default/big-{k}"] == 1
        memory.terminate()
        await eventually(
            lambda: node_of(memory, "big-0") and node_of(memory, "big-1"), what="gang bound"
        )
        assert memory.status_writes["default/big-0"] == memory.status_writes["default/big-1"] == 1


async def test_a_nomination_made_outside_an_attempt_is_written_alone_at_once(
    cluster: tuple[LingeringCluster, SchedulerRuntime],
) -> None:
    memory, runtime = cluster
    obj = memory.create_pod(pod("waiting", gpus=8, priority=0, gang=("never", 2)))
    await runtime.settle()
    told = message_of(memory, "waiting")
    writes = memory.status_writes["default/waiting"]
    runtime.scheduler.nominate(PodRef.of(obj), "dgx-a", memory.nominate)
    await runtime.settle()
    waiting = memory.pod("default", "waiting")
    assert waiting is not None
    assert waiting["status"]["nominatedNodeName"] == "dgx-a"
    assert message_of(memory, "waiting") == told  # its explanation is left as it was
    assert memory.status_writes["default/waiting"] == writes + 1
