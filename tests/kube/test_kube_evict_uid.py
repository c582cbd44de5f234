"""Evictions are for the pod decided on: the writer sends the pod's UID as the Eviction's
precondition, so an eviction decided for a pod that was deleted and re-created under its name
since (a StatefulSet's replica, a re-created gang member) leaves the new pod alone — and counts as
done, the pod it was meant for being gone — on the real API server. A preemptor's nomination
(``status.nominatedNodeName``) is guarded the same way.
"""

from __future__ import annotations

from typing import Any

import pytest

from common.kube import PODS, KubeClient, NotFound
from coordinator.adapters.kube.writer import KubeClusterWriter, kube_nominator
from coordinator.engine.ports import PodRef
from devcluster.pods import pod

pytestmark = pytest.mark.kube


async def _running(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """A pod bound to a node and Running (what a kubelet would report), as evictions meet them:
    the API server checks disruption budgets for it rather than deleting it outright."""
    await kube.create(PODS, pod(name, namespace=None, node="gpu-node-0"), namespace=namespace)
    return await kube.patch(
        PODS, name, {"status": {"phase": "Running"}}, namespace=namespace, subresource="status"
    )


async def test_an_eviction_for_a_pod_re_created_since_leaves_the_new_one_alone(
    kube: KubeClient, namespace: str
) -> None:
    old = await _running(kube, namespace, "worker-0")
    await kube.delete(PODS, "worker-0", namespace=namespace, grace_period_seconds=0)
    new = await _running(kube, namespace, "worker-0")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    writer = KubeClusterWriter(kube)

    # Decided for the old pod: no error (it is gone, which is what the eviction wanted) ...
    await writer.evict(PodRef(namespace, "worker-0", old["metadata"]["uid"]))
    after = await kube.get(PODS, "worker-0", namespace=namespace)
    # ... and the new pod of that name keeps running, not even being deleted.
    assert after["metadata"]["uid"] == new["metadata"]["uid"]
    assert "deletionTimestamp" not in after["metadata"]

    # Decided for the pod that is there, the same eviction goes through (at once: grace 0).
    await writer.evict(PodRef(namespace, "worker-0", new["metadata"]["uid"]), grace_period_s=0)
    with pytest.raises(NotFound):
        await kube.get(PODS, "worker-0", namespace=namespace)


async def test_an_eviction_for_a_pod_already_gone_is_done(kube: KubeClient, namespace: str) -> None:
    old = await _running(kube, namespace, "worker-1")
    await kube.delete(PODS, "worker-1", namespace=namespace, grace_period_seconds=0)
    await KubeClusterWriter(kube).evict(PodRef(namespace, "worker-1", old["metadata"]["uid"]))


async def test_a_nomination_for_a_pod_re_created_since_leaves_the_new_one_alone(
    kube: KubeClient, namespace: str
) -> None:
    old = await kube.create(PODS, pod("big-0", namespace=None), namespace=namespace)
    await kube.delete(PODS, "big-0", namespace=namespace, grace_period_seconds=0)
    new = await kube.create(PODS, pod("big-0", namespace=None), namespace=namespace)
    nominate = kube_nominator(kube)

    await nominate(PodRef(namespace, "big-0", old["metadata"]["uid"]), "gpu-node-0")
    after = await kube.get(PODS, "big-0", namespace=namespace)
    assert "nominatedNodeName" not in after["status"]

    await nominate(PodRef(namespace, "big-0", new["metadata"]["uid"]), "gpu-node-0")
    after = await kube.get(PODS, "big-0", namespace=namespace)
    assert after["status"]["nominatedNodeName"] == "gpu-node-0"
