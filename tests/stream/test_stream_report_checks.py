"""Impossible agent reports over the real socket: each is refused with ``invalid-state`` and a
reason naming the problem, nothing of it is kept, and a good agent on another node streams on.
A holding of a device the node did not report is not impossible — it is what the kubelet handed
out — so it is kept and the stream stays open."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from common.model import NodeTopology
from common.wire import CloseReason, ContainerAllocation, Delta, DeviceAllocation, GpuState, encode
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.backend import MemoryBackend
from coordinator.app.config.sections import Config, CoordinatorSection
from coordinator.app.main import running, wire
from coordinator.inventory.store import Inventory
from tests.stream.test_stream_end_to_end import _raw_close, _start, _stop
from tests.support.clock import ManualClock
from tests.support.inventory_wait import until
from tests.support.stream_frames import allocation, hello, mig_layout, topology, with_gpu

NO_SWEEPS = Config(coordinator=CoordinatorSection(sweep_interval_s=3600))


@pytest.fixture
def inv() -> Inventory:
    return Inventory(stale_ttl_s=30.0, clock=ManualClock(100.0))


@pytest.fixture
async def coordinator(inv: Inventory) -> AsyncIterator[str]:
    async with running(wire(NO_SWEEPS, MemoryBackend(MemoryCluster(inv)))) as url:
        yield url


def _b(**changes: object) -> NodeTopology:
    """node-b's topology with GPU 1 changed."""
    return with_gpu(topology("node-b"), 1, **changes)


def _cpus(gpu_affinity: tuple[int, ...]) -> NodeTopology:
    return _b(cpu_affinity=gpu_affinity)


def _mig_reusing_gpu1() -> NodeTopology:
    topo = mig_layout(topology("node-b"), 0, ["3g.40gb"])
    inst = msgspec.structs.replace(topo.gpus[0].mig_instances[0], uuid="GPU-node-b-1")
    return with_gpu(topo, 0, mig_instances=(inst,))


BAD_HELLOS = {
    "empty-uuid": ({"topology": _b(uuid="")}, "GPU 1 has an empty UUID"),
    "blank-uuid": ({"topology": _b(uuid="  ")}, "GPU 1 has an empty UUID"),
    "duplicate-uuid": ({"topology": _b(uuid="GPU-node-b-0")}, "share UUID GPU-node-b-0"),
    "mig-uuid-of-a-gpu": ({"topology": _mig_reusing_gpu1()}, "share UUID GPU-node-b-1"),
    "negative-total": (
        {"topology": _b(memory_total_mib=-1, memory_free_mib=None)},
        "memory_total_mib -1 is negative",
    ),
    "negative-free": ({"topology": _b(memory_free_mib=-5)}, "memory_free_mib -5 is negative"),
    "free-above-total": (
        {"topology": _b(memory_free_mib=90000)},
        "memory_free_mib 90000 exceeds its total 81920",
    ),
    "negative-affinity": ({"topology": _cpus((-1,))}, "cpu_affinity names CPU -1"),
    "affinity-beyond-cpus": (
        {"topology": _cpus((0, 32))},
        "cpu_affinity names CPU 32 (the node has 32 CPUs)",
    ),
    "allocation-beyond-cpus": (
        {
            "allocations": (
                ContainerAllocation(namespace="ml", pod="p", container="c", cpus=(0, 40)),
            )
        },
        "allocation of ml/p names CPU 40",
    ),
}


@pytest.mark.parametrize(("kw", "detail"), list(BAD_HELLOS.values()), ids=list(BAD_HELLOS))
async def test_impossible_hello_is_refused_with_its_reason_and_others_stream_on(
    coordinator: str, inv: Inventory, kw: dict[str, object], detail: str
) -> None:
    client, task = await _start(coordinator, "node-a")
    code, message = await _raw_close(coordinator, encode(hello("node-b", **kw)))
    assert code == CloseReason.INVALID_STATE.ws_code
    assert message.startswith("invalid-state: ")
    assert detail in message
    assert "node-b" not in inv  # nothing of the refused report is kept
    client.publish(with_gpu(topology("node-a"), 0, healthy=False))
    await until(inv, lambda: inv.node("node-a").free["nvidia.com/gpu"] == 1)  # type: ignore[union-attr]
    await _stop(client, task)


async def test_a_hello_reusing_another_live_nodes_gpus_is_refused_naming_that_node(
    coordinator: str, inv: Inventory
) -> None:
    client, task = await _start(coordinator, "node-a")
    thief = msgspec.structs.replace(topology("node-b"), gpus=topology("node-a").gpus)
    code, message = await _raw_close(coordinator, encode(hello("node-b", topology=thief)))
    assert code == CloseReason.INVALID_STATE.ws_code
    assert message == "invalid-state: GPU-node-a-0 is already reported by node node-a"
    assert inv.names() == ["node-a"]
    client.publish(with_gpu(topology("node-a"), 1, healthy=False))
    await until(inv, lambda: inv.node("node-a").free["nvidia.com/gpu"] == 1)  # type: ignore[union-attr]
    await _stop(client, task)


def test_a_stale_nodes_gpus_can_be_reported_by_another_node() -> None:
    clock = ManualClock(0.0)
    inv = Inventory(stale_ttl_s=5.0, clock=clock)
    inv.apply_hello(
        "node-a",
        agent_id="a",
        agent_version="t",
        seq=0,
        topology=topology("node-a"),
        allocations=(),
    )
    moved = msgspec.structs.replace(topology("node-b"), gpus=topology("node-a").gpus)
    clock.now += 6  # node-a's agent went silent: the GPUs were moved to node-b
    assert inv.sweep() == ["node-a"]
    inv.apply_hello(
        "node-b", agent_id="b", agent_version="t", seq=0, topology=moved, allocations=()
    )
    assert inv.node("node-b").topology == moved  # type: ignore[union-attr]


BAD_DELTAS = {
    "free-above-total": (
        Delta(seq=1, gpus=(GpuState(index=0, uuid="GPU-node-b-0", memory_free_mib=99999),)),
        "memory_free_mib 99999 exceeds its total 81920",
    ),
}


@pytest.mark.parametrize(("delta", "detail"), list(BAD_DELTAS.values()), ids=list(BAD_DELTAS))
async def test_impossible_delta_is_refused_and_the_last_good_state_stays(
    coordinator: str, inv: Inventory, delta: Delta, detail: str
) -> None:
    code, message = await _raw_close(coordinator, encode(hello("node-b")), encode(delta))
    assert code == CloseReason.INVALID_STATE.ws_code
    assert detail in message
    state = inv.node("node-b")
    assert state is not None
    assert state.seq == 0
    assert state.topology == topology("node-b")
    assert state.allocations == ()


async def test_holdings_of_devices_the_node_lacks_are_kept_and_the_stream_stays_open(
    coordinator: str, inv: Inventory
) -> None:
    client, task = await _start(coordinator, "node-b")
    mig = ContainerAllocation(
        namespace="default",
        pod="m",
        container="c",
        devices=(DeviceAllocation(resource="nvidia.com/mig-1g.10gb", ids=("MIG-x",)),),
    )
    odd = (allocation("train", "GPU-node-b-0", "GPU-nowhere"), allocation("p", "GPU-elsewhere"))
    client.publish(topology("node-b"), (*odd, mig))
    await until(inv, lambda: len(inv.node("node-b").allocations) == 3)  # type: ignore[union-attr]
    client.publish(with_gpu(topology("node-b"), 1, healthy=False), odd)
    await until(inv, lambda: inv.node("node-b").free["nvidia.com/gpu"] == 1)  # type: ignore[union-attr]
    state = inv.node("node-b")
    assert state is not None
    assert state.connected
    assert state.allocations == odd
    assert {u.uuid: u.holder for u in state.gpu_use}["GPU-node-b-0"] == "default/train"
    await _stop(client, task)
