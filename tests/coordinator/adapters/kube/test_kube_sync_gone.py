"""KubeSync on a real API server whose watch cache is off (so etcd compaction shows): a watch
resumed from a compacted resourceVersion gets 410 Gone, the sync re-lists, and keeps following
changes afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from common.kube import NAMESPACES, NODES, PODS, KubeClient
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.inventory.store import Inventory
from devcluster.controlplane import ControlPlane
from devcluster.pods import gpu_pod
from tests.support.etcd import compact
from tests.support.inventory_wait import until

pytestmark = pytest.mark.kube


@pytest.fixture
async def client(uncached_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(uncached_plane.kubeconfig) as c:
        yield c


async def test_watch_from_a_compacted_version_relists_and_keeps_following(
    uncached_plane: ControlPlane, client: KubeClient, unique_name: Callable[[str], str]
) -> None:
    namespace, node = unique_name("sync"), unique_name("gone-node")
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    await client.create(NAMESPACES, ns)
    await client.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "spec": {}}
    )
    await client.patch(
        NODES,
        node,
        {
            "status": {
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
        subresource="status",
    )
    await client.create(
        PODS,
        gpu_pod("first", 2, node=node, scheduler=None),
        namespace=namespace,
    )
    inv = Inventory(stale_ttl_s=30)
    synced = asyncio.Event()
    lists: list[int] = []  # one entry per completed (re)list once both resources are synced

    def on_synced() -> None:
        lists.append(1)
        synced.set()

    sync = KubeSync(client, inv, on_synced=on_synced, watch_timeout_s=1)
    task = asyncio.create_task(sync.run())
    try:
        async with asyncio.timeout(120):  # guards a hang only
            await synced.wait()
        synced.clear()
        assert inv.node(node).free["nvidia.com/gpu"] == 6  # type: ignore[union-attr]
        relists = sync.relists
        # Move etcd on without touching pods or nodes, then compact: the next resumed watch
        # (every second) starts from a revision that no longer exists.
        for _ in range(3):
            await client.create(
                NAMESPACES,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": unique_name("bump")},
                },
            )
        await asyncio.to_thread(compact, uncached_plane)
        async with asyncio.timeout(120):  # guards a hang only
            while len(lists) < 3:  # the first sync, then both the node and the pod watch re-list
                await synced.wait()
                synced.clear()
        assert sync.relists == relists + 2
        await client.create(
            PODS,
            gpu_pod("second", 3, node=node, scheduler=None),
            namespace=namespace,
        )
        await until(inv, lambda: inv.node(node).free["nvidia.com/gpu"] == 3)  # type: ignore[union-attr]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
