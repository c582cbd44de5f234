"""One-request binds on the real API server: the Binding's annotations land on the pod together
with ``spec.nodeName``, the uid guard still holds, and a rate-limited client still works."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from common.kube import NODES, PODS, ClientSettings, Conflict, KubeClient, KubeError, RateLimit
from devcluster.pods import pod

pytestmark = pytest.mark.kube


async def test_bind_sets_annotations_and_node_in_one_update(
    kube: KubeClient, namespace: str, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("gpu")
    await kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    created = await kube.create(
        PODS, pod("p", namespace=None, annotations={"team": "ml"}), namespace=namespace
    )
    await kube.bind(
        namespace=namespace,
        pod="p",
        node=node,
        pod_uid=created["metadata"]["uid"],
        annotations={"topos.io/assigned-gpus": "GPU-1,GPU-2", "topos.io/assigned-numa": "0"},
    )
    # The first change after the create already carries both: no moment where the pod is on
    # the node without its GPU assignment (what a device plugin reading it would see).
    changes = kube.watch(
        PODS,
        namespace=namespace,
        field_selector="metadata.name=p",
        resource_version=created["metadata"]["resourceVersion"],
    )
    try:
        kind, first = await asyncio.wait_for(anext(changes), 120)  # guards a hang only
    finally:
        await changes.aclose()  # type: ignore[attr-defined]
    assert kind == "MODIFIED"
    assert first["spec"]["nodeName"] == node
    assert first["metadata"]["annotations"] == {
        "team": "ml",  # the pod's own annotations are kept
        "topos.io/assigned-gpus": "GPU-1,GPU-2",
        "topos.io/assigned-numa": "0",
    }


async def test_a_refused_bind_writes_no_annotations(
    kube: KubeClient, namespace: str, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("gpu")
    await kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    await kube.create(
        PODS, pod("q", namespace=None, annotations={"team": "ml"}), namespace=namespace
    )
    with pytest.raises(KubeError):  # a decision made for an earlier pod of that name
        await kube.bind(
            namespace=namespace,
            pod="q",
            node=node,
            pod_uid="00000000-dead-beef-0000-000000000000",
            annotations={"topos.io/assigned-gpus": "GPU-9"},
        )
    left = await kube.get(PODS, "q", namespace=namespace)
    assert "nodeName" not in left["spec"]
    assert left["metadata"]["annotations"] == {"team": "ml"}
    await kube.bind(namespace=namespace, pod="q", node=node)
    with pytest.raises(Conflict):  # bound already: annotations of a second bind are refused too
        await kube.bind(namespace=namespace, pod="q", node=node, annotations={"x": "y"})
    assert "x" not in (await kube.get(PODS, "q", namespace=namespace))["metadata"]["annotations"]


async def test_a_rate_limited_client_does_its_work(kubeconfig: Path, namespace: str) -> None:
    settings = ClientSettings(rate_limit=RateLimit(qps=1000, burst=2))
    async with await KubeClient.connect(kubeconfig, settings=settings) as limited:
        for i in range(6):  # more requests than the burst: the later ones wait their turn
            await limited.create(
                PODS, pod(f"r-{i}", namespace=None, annotations={"team": "ml"}), namespace=namespace
            )
        listed = await limited.list(PODS, namespace=namespace)
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == [f"r-{i}" for i in range(6)]
