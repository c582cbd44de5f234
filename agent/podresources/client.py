"""An asyncio client for the kubelet PodResources v1 API over its unix socket.

``List`` says which devices (GPU UUIDs, MIG device ids), CPU ids and memory each running
container holds, with the NUMA nodes they sit on; ``GetAllocatableResources`` says what the
kubelet can hand out at all. The kubelet enforces placement (device plugin, CPU and Topology
Managers); this is how the agent learns what actually happened.
"""

from __future__ import annotations

import asyncio
import os
from types import TracebackType
from typing import Any, Final

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from agent.podresources import proto
from agent.podresources.types import (
    Allocatable,
    ContainerAllocation,
    DeviceAllocation,
    MemoryAllocation,
)

DEFAULT_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
# The kubelet answers List with up to 16 MiB (its own server limit); gRPC's client default is 4.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024


class PodResourcesError(RuntimeError):
    """The PodResources API could not answer; the message says why in one line."""


def _numa(topology: Any) -> tuple[int, ...]:
    return tuple(sorted(int(node.ID) for node in topology.nodes))


def _devices(items: Any) -> tuple[DeviceAllocation, ...]:
    return tuple(
        DeviceAllocation(
            resource_name=str(d.resource_name),
            device_ids=tuple(str(i) for i in d.device_ids),
            numa_nodes=_numa(d.topology),
        )
        for d in items
    )


def _memory(items: Any) -> tuple[MemoryAllocation, ...]:
    return tuple(
        MemoryAllocation(
            memory_type=str(m.memory_type), size_bytes=int(m.size), numa_nodes=_numa(m.topology)
        )
        for m in items
    )


def decode_list(response: Any) -> tuple[ContainerAllocation, ...]:
    """Flatten a ``ListPodResourcesResponse`` to one record per container."""
    return tuple(
        ContainerAllocation(
            namespace=str(pod.namespace),
            pod=str(pod.name),
            container=str(c.name),
            devices=_devices(c.devices),
            cpu_ids=tuple(sorted(int(i) for i in c.cpu_ids)),
            memory=_memory(c.memory),
        )
        for pod in response.pod_resources
        for c in pod.containers
    )


def decode_allocatable(response: Any) -> Allocatable:
    return Allocatable(
        devices=_devices(response.devices),
        cpu_ids=tuple(sorted(int(i) for i in response.cpu_ids)),
        memory=_memory(response.memory),
    )


class PodResourcesClient:
    """``async with PodResourcesClient(path) as c: await c.list()``."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_s: float = 10.0) -> None:
        self._path = socket_path
        self._timeout = timeout_s
        self._channel: grpc.aio.Channel | None = None

    @property
    def socket_path(self) -> str:
        return self._path

    def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{os.path.abspath(self._path)}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
            )
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None

    async def __aenter__(self) -> PodResourcesClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, method: str, request: Any, response_type: Any) -> Any:
        if not await asyncio.to_thread(os.path.exists, self._path):
            raise PodResourcesError(
                f"kubelet PodResources socket {self._path} does not exist "
                "(mount /var/lib/kubelet/pod-resources into the agent)"
            )
        rpc = self._open().unary_unary(
            f"/{proto.SERVICE}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=None,  # raw bytes: decoded below, so garbage is our error
        )
        try:
            raw = await rpc(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            hint = ""
            if code == grpc.StatusCode.UNAVAILABLE:
                hint = f" (is the kubelet running and {self._path} its socket?)"
            elif code == grpc.StatusCode.UNIMPLEMENTED:
                hint = " (this kubelet does not serve it; it needs Kubernetes ≥ 1.23)"
            raise PodResourcesError(
                f"PodResources {method} failed: {code.name}: {exc.details()}{hint}"
            ) from None
        try:
            return response_type.FromString(raw)
        except DecodeError as exc:
            raise PodResourcesError(
                f"PodResources {method} failed: reply is not a {response_type.__name__}: {exc}"
            ) from None

    async def list(self) -> tuple[ContainerAllocation, ...]:
        """Every container's devices, CPUs and memory, as the kubelet assigned them."""
        response = await self._call(
            "List", proto.ListPodResourcesRequest(), proto.ListPodResourcesResponse
        )
        return decode_list(response)

    async def allocatable(self) -> Allocatable:
        """What the kubelet can assign on this node (devices, CPU ids, memory per NUMA node)."""
        response = await self._call(
            "GetAllocatableResources",
            proto.AllocatableResourcesRequest(),
            proto.AllocatableResourcesResponse,
        )
        return decode_allocatable(response)
