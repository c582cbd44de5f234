"""A fake kubelet PodResources server (the real gRPC service, on a unix socket) whose holdings a
test sets: what the device plugin "gave" each pod, for an agent started with
``--pod-resources-socket``."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from agent.podresources import proto as pb


@dataclass
class FakePodResources:
    """``holdings[(namespace, pod)] = (resource, device ids)``; ``List`` answers with them."""

    holdings: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    lists: int = 0  # List calls answered

    def give(self, namespace: str, pod: str, *ids: str, resource: str = "nvidia.com/gpu") -> None:
        self.holdings[(namespace, pod)] = (resource, ids)

    async def _list(self, request: Any, context: Any) -> Any:
        self.lists += 1
        return pb.ListPodResourcesResponse(
            pod_resources=[
                pb.PodResources(
                    name=pod,
                    namespace=namespace,
                    containers=[
                        pb.ContainerResources(
                            name="main",
                            devices=[
                                pb.ContainerDevices(resource_name=resource, device_ids=list(ids))
                            ],
                        )
                    ],
                )
                for (namespace, pod), (resource, ids) in sorted(self.holdings.items())
            ]
        )

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Serve on a fresh unix socket; yields its path."""
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list,
                    request_deserializer=pb.ListPodResourcesRequest.FromString,
                    response_serializer=lambda m: m.SerializeToString(),
                )
            },
        )
        # a short path: unix socket names are limited to 107 bytes
        with tempfile.TemporaryDirectory(prefix="pr-") as directory:
            path = str(Path(directory) / "kubelet.sock")
            server = grpc.aio.server()
            server.add_generic_rpc_handlers((handler,))
            server.add_insecure_port(f"unix://{path}")
            await server.start()
            try:
                yield path
            finally:
                await server.stop(None)
