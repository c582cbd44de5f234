"""Impossible agent reports over the real socket: each is refused with ``invalid-state`` and a
reason naming the problem, nothing of it is kept, and a good agent on another node streams on.
A holding of a device the node did not report is not impossible — it is what the kubelet handed
out — so it is kept and the stream stays open."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from common.model import MigProfileCapacity, Nic, NodeTopology, NumaNode
from common.wire import (
    CloseReason,
    ContainerAllocation,
    Delta,
    DeviceAllocation,
    GpuState,
    encode,
    gpu_state,
)
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config, CoordinatorSection
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.inventory.store import Inventory
from tests.stream.test_stream_end_to_end import _raw_close, _start, _stop
from tests.support.clock import ManualClock
from tests.support.inventory_wait import until
from tests.support.stream_frames import allocation, hello, mig_layout, topology, with_gpu

# A stream whose bad report was accepted is closed for idling soon, not after a minute.
NO_SWEEPS = Config(coordinator=CoordinatorSection(sweep_interval_s=3600, stream_idle_timeout_s=3))


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


def _nodes(*numa: tuple[int, tuple[int, ...]]) -> NodeTopology:
    return msgspec.structs.replace(
        topology("node-b"), numa_nodes=tuple(NumaNode(id=i, cpus=c) for i, c in numa)
    )


def _nics(*nics: Nic, **links: object) -> NodeTopology:
    return msgspec.structs.replace(topology("node-b"), nics=nics, **links)


def _mig(*changes: dict[str, object]) -> NodeTopology:
    """node-b with GPU 0 in MIG mode: two 3g.40gb instances, the second changed."""
    topo = mig_layout(topology("node-b"), 0, ["3g.40gb", "3g.40gb"])
    first, second = topo.gpus[0].mig_instances
    for change in changes:
        second = msgspec.structs.replace(second, **change)
    return with_gpu(topo, 0, mig_instances=(first, second))


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
    "gpu-numa-out-of-range": (
        {"topology": _b(numa_node=99)},
        "GPU 1 numa_node 99 is not a NUMA node of this node (0-1)",
    ),
    "gpu-numa-negative": ({"topology": _b(numa_node=-1)}, "GPU 1 numa_node -1 is negative"),
    "numa-listed-twice": (
        {"topology": _nodes((0, (0, 1)), (0, (2, 3)))},
        "NUMA node 0 is listed twice",
    ),
    "cpu-in-two-numa-nodes": (
        {"topology": _nodes((0, tuple(range(16))), (1, tuple(range(15, 32))))},
        "CPU 15 is in NUMA node 0 and NUMA node 1",
    ),
    "nic-numa-out-of-range": (
        {"topology": _nics(Nic(name="mlx5_0", numa_node=7))},
        "NIC mlx5_0 numa_node 7 is not a NUMA node of this node (0-1)",
    ),
    "nic-listed-twice": (
        {"topology": _nics(Nic(name="mlx5_0"), Nic(name="mlx5_0"))},
        "NIC mlx5_0 is listed twice",
    ),
    "nic-nic-matrix-not-square": (
        {"topology": _nics(Nic(name="mlx5_0"), Nic(name="mlx5_1"), nic_nic_links=(("X",),))},
        "nic_nic_links must be 2x2 for 2 NICs",
    ),
    "nic-link-not-a-link": (
        {"topology": _nics(Nic(name="mlx5_0"), nic_links=(("PIX",), ("WARP",)))},
        "NIC link 'WARP'",
    ),
    "mig-instance-twice": ({"topology": _mig({"gi_id": 1})}, "GPU 0 lists MIG gi1 ci0 twice"),
    "mig-negative-placement": (
        {"topology": _mig({"placement_start": -4})},
        "MIG gi2 of GPU 0 has placement -4+3",
    ),
    "mig-creatable-above-total": (
        {
            "topology": with_gpu(
                topology("node-b"),
                1,
                mig_creatable=(
                    MigProfileCapacity(
                        profile="1g.10gb", free=9, total=7, memory_mib=9728, slices=1
                    ),
                ),
            )
        },
        "GPU 1 MIG profile 1g.10gb: free 9 of total 7",
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
    "same-gpu-twice": (
        Delta(
            seq=1,
            gpus=(
                GpuState(index=1, uuid="GPU-node-b-1"),
                GpuState(index=1, uuid="GPU-node-b-1", healthy=False),
            ),
        ),
        "delta lists GPU 1 twice",
    ),
    "mig-instance-twice": (
        Delta(
            seq=1,
            gpus=(
                msgspec.structs.replace(gpu_state(_mig({"gi_id": 1}).gpus[0]), uuid="GPU-node-b-0"),
            ),
        ),
        "GPU 0 lists MIG gi1 ci0 twice",
    ),
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


async def test_an_impossible_second_hello_keeps_the_state_of_the_first(
    coordinator: str, inv: Inventory
) -> None:
    code, message = await _raw_close(
        coordinator,
        encode(hello("node-b", seq=3)),
        encode(hello("node-b", topology=_b(numa_node=99))),
    )
    assert code == CloseReason.INVALID_STATE.ws_code
    assert "GPU 1 numa_node 99 is not a NUMA node" in message
    state = inv.node("node-b")
    assert state is not None
    assert state.seq == 3
    assert state.topology == topology("node-b")


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
