"""Gangs of half-GPU members on the in-memory cluster, their bound halves counted as halves of the
GPU they share (and their ``nvidia.com/gpu: 1``, a time-slicing replica, as no whole GPU): found
partly bound at start-up (a coordinator stopped between its binds), the gang is completed on the
room left; when a GPU under one member fails, that member alone moves to a GPU with room."""

from __future__ import annotations

from typing import Any

from agent.devices import discover_profile
from common.wire import GpuState
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


def half(name: str, *, gpu: str | None = None) -> dict[str, Any]:
    ann = {"topos.io/gpu-fraction": "0.5"}
    if gpu is not None:  # bound before the restart: what the binder wrote
        ann |= {"topos.io/assigned-gpus": gpu, "topos.io/gpu-share": "fraction=0.5,memory=40779Mi"}
    return pod(
        name,
        namespace="ml",
        gpus=1,
        gang=("train", 3),
        annotations=ann,
        node="dgx-a" if gpu is not None else None,
    )


async def test_a_partly_bound_gang_of_halves_completes_on_the_room_left() -> None:
    inventory = Inventory(stale_ttl_s=3600)
    memory = MemoryCluster(inventory)
    topo = discover_profile("dgx-h100", hostname="dgx-a")
    # time-slicing: four nvidia.com/gpu replicas of each GPU
    memory.add_node("dgx-a", topology=topo, allocatable={"nvidia.com/gpu": 32})
    uuids = [g.uuid for g in topo.gpus]
    # GPUs 2-7 held whole; GPU 0 full with two bound halves of the gang; GPU 1 free.
    ann = {"topos.io/assigned-gpus": ",".join(uuids[2:])}
    memory.create_pod(pod("filler", namespace="ml", gpus=6, node="dgx-a", annotations=ann))
    memory.create_pod(half("train-0", gpu=uuids[0]))
    memory.create_pod(half("train-1", gpu=uuids[0]))
    memory.create_pod(half("train-2"))
    runtime = memory_runtime(inventory, memory)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))
    async with runtime, gangs:

        def placed() -> str | None:
            obj = memory.pod("ml", "train-2")
            assert obj is not None
            return str(obj["metadata"]["annotations"].get("topos.io/assigned-gpus") or "") or None

        assert await eventually(placed, what="train-2 bound", timeout_s=10) == uuids[1]
        (status,) = gangs.step.manager.statuses()
        assert (status.phase, status.bound) == ("Bound", 3)
        assert gangs.step.stats.restart_partial == 1
        for name in ("train-0", "train-1", "filler"):
            assert memory.pod("ml", name) is not None  # nobody released


async def test_a_half_on_a_failed_gpu_moves_to_a_gpu_with_half_free() -> None:
    """Members of gang ``train`` hold halves on GPU 0 of a and b; every other GPU is held whole
    but c's GPU 0, where another pod holds half. a's GPU 0 fails: only the member there moves, to
    c. (Its ``nvidia.com/gpu: 1`` counted as a whole GPU, there was none, and the whole gang was
    evicted to wait.)"""
    inventory = Inventory(stale_ttl_s=3600)
    memory = MemoryCluster(inventory)
    topos = {n: discover_profile("dgx-h100", hostname=n) for n in "abc"}
    for n, topo in topos.items():
        memory.add_node(n, topology=topo, allocatable={"nvidia.com/gpu": 32})
        ann = {"topos.io/assigned-gpus": ",".join(g.uuid for g in topo.gpus[1:])}
        memory.create_pod(pod(f"filler-{n}", namespace="ml", gpus=7, node=n, annotations=ann))

    def bound_half(name: str, node: str, gang: bool) -> dict[str, Any]:
        obj = half(name, gpu=topos[node].gpus[0].uuid)
        obj["spec"]["nodeName"] = node
        if not gang:
            for key in ("topos.io/gang", "topos.io/gang-min"):
                del obj["metadata"]["labels"][key]
        return obj

    memory.create_pod(bound_half("train-0", "a", True))
    memory.create_pod(bound_half("train-1", "b", True))
    memory.create_pod(bound_half("train-2", "b", True))
    memory.create_pod(bound_half("other-c", "c", False))
    runtime = memory_runtime(inventory, memory)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))
    async with runtime, gangs:
        await runtime.settle()
        dead = topos["a"].gpus[0]
        inventory.apply_delta(
            "a",
            seq=1,
            gpus=(GpuState(index=0, uuid=dead.uuid, healthy=False, health_reason="XID 79"),),
            allocations=None,
        )
        assert gangs.recovery is not None
        recovery = gangs.recovery
        await eventually(lambda: recovery.plans, what="a recovery plan", timeout_s=10)
        (unit,) = recovery.plans[-1].units
        assert (unit.mode, unit.moves) == ("partial", (("ml/train-0", "c"),))
        assert memory.pod("ml", "train-1") is not None  # the rest of the gang stays
