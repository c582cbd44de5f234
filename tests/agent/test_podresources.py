"""The kubelet PodResources v1 client against a real gRPC server on a temporary unix socket:
List and GetAllocatableResources decode devices, CPU ids, memory and NUMA nodes; a missing
socket and an unimplemented method give clear errors."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from agent.podresources import (
    ContainerAllocation,
    DeviceAllocation,
    PodResourcesClient,
    PodResourcesError,
)
from agent.podresources import proto as pb


def _topo(*ids: int) -> Any:
    return pb.TopologyInfo(nodes=[pb.NUMANode(ID=i) for i in ids])


LIST_REPLY = pb.ListPodResourcesResponse(
    pod_resources=[
        pb.PodResources(
            name="train-0",
            namespace="ml",
            containers=[
                pb.ContainerResources(
                    name="worker",
                    devices=[
                        pb.ContainerDevices(
                            resource_name="nvidia.com/gpu",
                            device_ids=["GPU-aaa", "GPU-bbb"],
                            topology=_topo(1),
                        )
                    ],
                    cpu_ids=[17, 16, 18, 19],
                    memory=[
                        pb.ContainerMemory(memory_type="memory", size=1 << 30, topology=_topo(1))
                    ],
                ),
                pb.ContainerResources(name="sidecar"),
            ],
        ),
        pb.PodResources(
            name="infer",
            namespace="default",
            containers=[
                pb.ContainerResources(
                    name="server",
                    devices=[
                        pb.ContainerDevices(
                            resource_name="nvidia.com/mig-1g.10gb", device_ids=["MIG-1"]
                        )
                    ],
                )
            ],
        ),
    ]
)

ALLOCATABLE_REPLY = pb.AllocatableResourcesResponse(
    devices=[
        pb.ContainerDevices(
            resource_name="nvidia.com/gpu", device_ids=["GPU-aaa"], topology=_topo(0)
        ),
        pb.ContainerDevices(
            resource_name="nvidia.com/gpu", device_ids=["GPU-bbb"], topology=_topo(1)
        ),
    ],
    cpu_ids=[3, 1, 2, 0],
    memory=[pb.ContainerMemory(memory_type="memory", size=64 << 30, topology=_topo(0))],
)


def _handler(methods: dict[str, tuple[Callable[[Any, Any], Any], Any]]) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            name: grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=req.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )
            for name, (fn, req) in methods.items()
        },
    )


@pytest.fixture
async def socket_path() -> AsyncIterator[str]:
    with tempfile.TemporaryDirectory() as d:  # short path: unix socket names are limited to 107
        yield str(Path(d) / "kubelet.sock")


async def _serve(
    path: str, methods: dict[str, tuple[Callable[[Any, Any], Any], Any]]
) -> grpc.aio.Server:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_handler(methods),))
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return server


async def test_list_and_allocatable(socket_path: str) -> None:
    seen: list[str] = []

    async def list_(request: Any, context: Any) -> Any:
        seen.append("List")
        return LIST_REPLY

    async def allocatable(request: Any, context: Any) -> Any:
        seen.append("GetAllocatableResources")
        return ALLOCATABLE_REPLY

    server = await _serve(
        socket_path,
        {
            "List": (list_, pb.ListPodResourcesRequest),
            "GetAllocatableResources": (allocatable, pb.AllocatableResourcesRequest),
        },
    )
    try:
        async with PodResourcesClient(socket_path) as client:
            containers = await client.list()
            alloc = await client.allocatable()
    finally:
        await server.stop(None)

    assert seen == ["List", "GetAllocatableResources"]
    assert [(c.namespace, c.pod, c.container) for c in containers] == [
        ("ml", "train-0", "worker"),
        ("ml", "train-0", "sidecar"),
        ("default", "infer", "server"),
    ]
    worker = containers[0]
    assert worker.devices == (
        DeviceAllocation(
            resource_name="nvidia.com/gpu", device_ids=("GPU-aaa", "GPU-bbb"), numa_nodes=(1,)
        ),
    )
    assert worker.cpu_ids == (16, 17, 18, 19)
    assert worker.memory[0].size_bytes == 1 << 30
    assert worker.memory[0].numa_nodes == (1,)
    assert containers[1] == ContainerAllocation(namespace="ml", pod="train-0", container="sidecar")
    assert containers[2].device_ids() == ("MIG-1",)
    assert containers[2].devices[0].numa_nodes == ()

    assert alloc.cpu_ids == (0, 1, 2, 3)
    assert [(d.device_ids, d.numa_nodes) for d in alloc.devices] == [
        (("GPU-aaa",), (0,)),
        (("GPU-bbb",), (1,)),
    ]
    assert alloc.memory[0].size_bytes == 64 << 30


async def test_missing_socket_is_a_clear_error(socket_path: str) -> None:
    async with PodResourcesClient(socket_path) as client:
        with pytest.raises(PodResourcesError, match="does not exist"):
            await client.list()


async def test_unimplemented_method_is_a_clear_error(socket_path: str) -> None:
    async def list_(request: Any, context: Any) -> Any:
        return LIST_REPLY

    server = await _serve(socket_path, {"List": (list_, pb.ListPodResourcesRequest)})
    try:
        async with PodResourcesClient(socket_path) as client:
            assert len(await client.list()) == 3
            with pytest.raises(
                PodResourcesError, match="GetAllocatableResources failed: UNIMPLEMENTED"
            ):
                await client.allocatable()
    finally:
        await server.stop(None)


async def test_server_error_does_not_poison_the_client(socket_path: str) -> None:
    calls = 0

    async def flaky(request: Any, context: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            await context.abort(grpc.StatusCode.INTERNAL, "checkpoint unreadable")
        return LIST_REPLY

    server = await _serve(socket_path, {"List": (flaky, pb.ListPodResourcesRequest)})
    try:
        async with PodResourcesClient(socket_path) as client:
            with pytest.raises(PodResourcesError, match="INTERNAL: checkpoint unreadable"):
                await client.list()
            assert len(await client.list()) == 3
    finally:
        await server.stop(None)


async def test_garbage_reply_is_an_error_not_a_crash(socket_path: str) -> None:
    # a server speaking a different schema: bytes that are not a ListPodResourcesResponse
    def raw(request: Any, context: Any) -> bytes:
        return b"\xff\xff\xff\xff"

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {"List": grpc.unary_unary_rpc_method_handler(raw, response_serializer=lambda b: b)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    try:
        async with PodResourcesClient(socket_path) as client:
            with pytest.raises(PodResourcesError, match="List failed"):
                await asyncio.wait_for(client.list(), 30)
    finally:
        await server.stop(None)


def _agent(hardware: Any, client: PodResourcesClient) -> Any:
    """An agent on ``hardware`` that reads allocations through ``client`` and publishes nothing."""
    from agent.cycle import Agent
    from agent.settings import AgentSettings

    settings = AgentSettings(node_name="n1", listen=None)
    return Agent(settings, source=hardware.source, publisher=None, podresources=client)


async def test_agent_turns_kubelet_allocations_into_stream_records(socket_path: str) -> None:
    from agent.hardware import open_hardware

    async def list_(request: Any, context: Any) -> Any:
        return LIST_REPLY

    server = await _serve(socket_path, {"List": (list_, pb.ListPodResourcesRequest)})
    hardware = open_hardware("pcie-8x", hostname="n1")
    try:
        async with PodResourcesClient(socket_path) as client:
            records = await _agent(hardware, client).allocations()
    finally:
        await server.stop(None)
        assert hardware.close is not None
        hardware.close()
    # the sidecar holds nothing and is left out; devices keep their NUMA nodes
    assert [(r.pod, r.container) for r in records] == [("train-0", "worker"), ("infer", "server")]
    assert records[0].devices[0].ids == ("GPU-aaa", "GPU-bbb")
    assert records[0].devices[0].numa_nodes == (1,)
    assert records[0].cpus == (16, 17, 18, 19)
    assert records[1].devices[0].resource == "nvidia.com/mig-1g.10gb"


async def test_agent_without_kubelet_socket_reports_no_allocations(socket_path: str) -> None:
    from agent.hardware import open_hardware

    hardware = open_hardware("pcie-8x", hostname="n1")
    try:
        async with PodResourcesClient(socket_path) as client:
            agent = _agent(hardware, client)
            assert await agent.allocations() == ()
            assert (await agent.cycle()).labels.labels["topos.io/gpu.count"] == "8"
    finally:
        assert hardware.close is not None
        hardware.close()
