"""410 Gone end to end: a list or watch from a resourceVersion etcd has compacted away.

The shared control plane serves lists and watches from the API server's watch cache, which
hides compaction, so this module starts its own control plane with ``--watch-cache=false``
and compacts etcd through etcd's HTTP gateway.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator

import pytest

from common.kube import NAMESPACES, PODS, Gone, KubeClient
from devcluster.binaries import Binaries
from devcluster.controlplane import ControlPlane, ControlPlaneSettings

pytestmark = pytest.mark.kube


@pytest.fixture(scope="module")
def uncached_plane(k8s_binaries: Binaries) -> Iterator[ControlPlane]:
    settings = ControlPlaneSettings(extra_apiserver_args=("--watch-cache=false",))
    with ControlPlane.start(binaries=k8s_binaries, settings=settings) as plane:
        yield plane


@pytest.fixture
async def uncached(uncached_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(uncached_plane.kubeconfig) as client:
        yield client


def compact_etcd(plane: ControlPlane) -> None:
    base = f"http://127.0.0.1:{plane.state.etcd_port}/v3/kv"
    probe = urllib.request.Request(f"{base}/range", data=b'{"key":"AA=="}', method="POST")
    with urllib.request.urlopen(probe, timeout=10) as reply:
        revision = json.load(reply)["header"]["revision"]
    body = json.dumps({"revision": revision, "physical": True}).encode()
    request = urllib.request.Request(f"{base}/compaction", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


async def test_list_and_watch_from_a_compacted_version_are_gone(
    uncached_plane: ControlPlane, uncached: KubeClient
) -> None:
    await uncached.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}
    )
    old = (await uncached.list(PODS, namespace="gone"))["resourceVersion"]
    for later in ("later-1", "later-2"):  # compaction must pass old + 1, where a watch starts
        await uncached.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": later}}
        )
    compact_etcd(uncached_plane)

    with pytest.raises(Gone) as listed:
        await uncached.list(
            PODS, namespace="gone", resource_version=old, resource_version_match="Exact"
        )
    assert listed.value.status == 410
    # the watch is accepted (HTTP 200) and then ends with an ERROR event carrying 410
    with pytest.raises(Gone, match="too old"):
        async for _ in uncached.watch(
            PODS, namespace="gone", resource_version=old, timeout_seconds=30
        ):
            pass
    # a fresh list gives a version to watch from again
    fresh = (await uncached.list(PODS, namespace="gone"))["resourceVersion"]
    events = [
        e
        async for e in uncached.watch(
            PODS, namespace="gone", resource_version=fresh, timeout_seconds=1
        )
    ]
    assert events == []
