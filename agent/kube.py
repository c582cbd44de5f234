"""The agent's Node verbs on top of ``common.kube`` (the one Kubernetes client adapter)."""

from __future__ import annotations

from agent.publish import JsonPatch, NodeMetadata, NodeNotFound
from common.kube import NODES, KubeClient, NotFound


class KubeNodeApi:
    """``agent.publish.NodeApi`` over a ``KubeClient``: GET the Node, merge-patch its metadata."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def get_node_metadata(self, name: str) -> NodeMetadata:
        try:
            node = await self._client.get(NODES, name)
        except NotFound:
            raise NodeNotFound(name) from None
        return NodeMetadata.from_node(node)

    async def patch_node_metadata(self, name: str, patch: JsonPatch) -> NodeMetadata:
        try:
            node = await self._client.patch(NODES, name, patch, patch_type="merge")
        except NotFound:
            raise NodeNotFound(name) from None
        return NodeMetadata.from_node(node)

    async def patch_node_status(self, name: str, patch: JsonPatch) -> None:
        try:
            await self._client.patch(
                NODES, name, patch, patch_type="strategic", subresource="status"
            )
        except NotFound:
            raise NodeNotFound(name) from None
