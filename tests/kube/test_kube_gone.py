"""410 Gone end to end: a list or watch from a resourceVersion etcd has compacted away.

The shared control plane serves lists and watches from the API server's watch cache, which
hides compaction, so this module uses the session's second control plane with
``--watch-cache=false`` (``uncached_plane``) and compacts etcd through its HTTP gateway.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from common.kube import NAMESPACES, PODS, Gone, KubeClient
from devcluster.controlplane import ControlPlane
from tests.support.etcd import compact

pytestmark = pytest.mark.kube


@pytest.fixture
async def uncached(uncached_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(uncached_plane.kubeconfig) as client:
        yield client


async def test_list_and_watch_from_a_compacted_version_are_gone(
    uncached_plane: ControlPlane, uncached: KubeClient, unique_name: Callable[[str], str]
) -> None:
    gone, *later = (unique_name(n) for n in ("gone", "later", "later"))
    await uncached.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": gone}}
    )
    old = (await uncached.list(PODS, namespace=gone))["resourceVersion"]
    for name in later:  # compaction must pass old + 1, where a watch starts
        await uncached.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    await asyncio.to_thread(compact, uncached_plane)

    with pytest.raises(Gone) as listed:
        await uncached.list(
            PODS, namespace=gone, resource_version=old, resource_version_match="Exact"
        )
    assert listed.value.status == 410
    # the watch is accepted (HTTP 200) and then ends with an ERROR event carrying 410
    with pytest.raises(Gone, match="too old"):
        async for _ in uncached.watch(
            PODS, namespace=gone, resource_version=old, timeout_seconds=30
        ):
            pass
    # a fresh list gives a version to watch from again
    fresh = (await uncached.list(PODS, namespace=gone))["resourceVersion"]
    events = [
        e
        async for e in uncached.watch(
            PODS, namespace=gone, resource_version=fresh, timeout_seconds=1
        )
    ]
    assert events == []
