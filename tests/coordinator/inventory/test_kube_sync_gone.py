"""KubeSync on a real API server whose watch cache is off (so etcd compaction shows): a watch
resumed from a compacted resourceVersion gets 410 Gone, the sync re-lists, and keeps following
changes afterwards."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from common.kube import NAMESPACES, NODES, PODS, KubeClient
from coordinator.inventory.kube_sync import KubeSync
from coordinator.inventory.store import Inventory
from devcluster.binaries import Binaries
from devcluster.controlplane import ControlPlane, ControlPlaneSettings

pytestmark = pytest.mark.kube


@pytest.fixture(scope="module")
def uncached_plane(k8s_binaries: Binaries) -> Iterator[ControlPlane]:
    settings = ControlPlaneSettings(extra_apiserver_args=("--watch-cache=false",))
    with ControlPlane.start(binaries=k8s_binaries, settings=settings) as plane:
        yield plane


@pytest.fixture
async def client(uncached_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(uncached_plane.kubeconfig) as c:
        yield c


def _compact(plane: ControlPlane) -> None:
    base = f"http://127.0.0.1:{plane.state.etcd_port}/v3/kv"
    probe = urllib.request.Request(f"{base}/range", data=b'{"key":"AA=="}', method="POST")
    with urllib.request.urlopen(probe, timeout=10) as reply:
        revision = json.load(reply)["header"]["revision"]
    body = json.dumps({"revision": revision, "physical": True}).encode()
    with urllib.request.urlopen(
        urllib.request.Request(f"{base}/compaction", data=body, method="POST"), timeout=10
    ):
        pass


async def until(inv: Inventory, predicate: Callable[[], bool]) -> None:
    changed = asyncio.Event()
    unsubscribe = inv.subscribe(lambda event: changed.set())
    try:
        async with asyncio.timeout(30):  # guards a hang only
            while not predicate():
                await changed.wait()
                changed.clear()
    finally:
        unsubscribe()


def _pod(name: str, node: str, gpus: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }


async def test_watch_from_a_compacted_version_relists_and_keeps_following(
    uncached_plane: ControlPlane, client: KubeClient
) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sync"}}
    await client.create(NAMESPACES, ns)
    await client.create(
        NODES,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gone-node"}, "spec": {}},
    )
    await client.patch(
        NODES,
        "gone-node",
        {
            "status": {
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
        subresource="status",
    )
    await client.create(PODS, _pod("first", "gone-node", 2), namespace="sync")
    inv = Inventory(stale_ttl_s=30)
    synced = asyncio.Event()
    lists: list[int] = []  # one entry per completed (re)list once both resources are synced

    def on_synced() -> None:
        lists.append(1)
        synced.set()

    sync = KubeSync(client, inv, on_synced=on_synced, watch_timeout_s=1)
    task = asyncio.create_task(sync.run())
    try:
        async with asyncio.timeout(30):
            await synced.wait()
        synced.clear()
        assert inv.node("gone-node").free["nvidia.com/gpu"] == 6  # type: ignore[union-attr]
        relists = sync.relists
        # Move etcd on without touching pods or nodes, then compact: the next resumed watch
        # (every second) starts from a revision that no longer exists.
        for i in range(3):
            await client.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"bump-{i}"}},
            )
        await asyncio.to_thread(_compact, uncached_plane)
        async with asyncio.timeout(30):
            while len(lists) < 3:  # the first sync, then both the node and the pod watch re-list
                await synced.wait()
                synced.clear()
        assert sync.relists == relists + 2
        await client.create(PODS, _pod("second", "gone-node", 3), namespace="sync")
        await until(inv, lambda: inv.node("gone-node").free["nvidia.com/gpu"] == 3)  # type: ignore[union-attr]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
