"""Namespace labels reach pod (anti-)affinity ``namespaceSelector``s from the API server's watch.

On the real control plane: a pod whose required podAffinity selects a cache pod through a
``namespaceSelector`` waits while no namespace carries the label, and is placed next to the cache
as soon as the cache's namespace is labelled — after the coordinator started, without anyone
telling it. Taking the label away again lets a pod with the same term in *anti*-affinity in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.kube import NAMESPACES, PODS, KubeClient
from coordinator.adapters.kube.namespaces import NamespaceLabels
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.gpu_cluster import GpuCluster

HOST = "kubernetes.io/hostname"


def _term(team: str) -> dict[str, Any]:
    return {
        "labelSelector": {"matchLabels": {"app": "cache"}},
        "namespaceSelector": {"matchLabels": {"team": team}},
        "topologyKey": HOST,
    }


async def test_a_namespace_labelled_after_start_is_seen_by_namespace_selectors(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    near = await cluster.add_node("near", "dgx-h100")
    await cluster.add_node("far", "dgx-h100")
    caches = f"{namespace}-caches"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": caches}}
    )
    cache = pod("cache", namespace=caches, labels={"app": "cache"}, node=near, scheduler=None)
    await kube.create(PODS, cache, namespace=caches)
    team = f"t{cluster.run}"

    async with cluster.coordinator():
        wants = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(team)]}}
        await cluster.create(pod("web", namespace=namespace, affinity=wants))
        message = await cluster.unschedulable("web")
        assert "didn't match pod affinity rules" in message

        await kube.patch(NAMESPACES, caches, {"metadata": {"labels": {"team": team}}})
        placed = await cluster.bound("web", timeout_s=30)
        assert placed["spec"]["nodeName"] == near

        # the label goes: a pod refusing to share a node with that team's cache may go there
        await kube.patch(NAMESPACES, caches, {"metadata": {"labels": {"team": None}}})
        avoid = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(team)]}
        }
        near_only = {HOST: near}  # the cache's node: refused there while the label is on
        await cluster.create(
            pod("loner", namespace=namespace, affinity=avoid, node_selector=near_only)
        )
        assert (await cluster.bound("loner", timeout_s=30))["spec"]["nodeName"] == near


def test_the_view_follows_namespaces_added_changed_and_gone() -> None:
    view = ClusterView(Inventory())
    changed: list[str] = []
    handler = NamespaceLabels(view, changed.append)

    def ns(name: str, **labels: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": labels}}

    handler.replace([ns("a", team="x"), ns("b")])
    assert view.snapshot().namespaces == {"a": {"team": "x"}, "b": {}}
    assert sorted(changed) == ["a", "b"]
    handler.apply("MODIFIED", ns("a", team="x"))  # a resync with nothing new
    assert sorted(changed) == ["a", "b"]
    handler.apply("MODIFIED", ns("a", team="y"))
    assert view.snapshot().namespaces["a"] == {"team": "y"}
    handler.apply("DELETED", ns("b"))
    handler.replace([ns("a", team="y"), ns("c")])  # a re-list: c appeared meanwhile
    assert view.snapshot().namespaces == {"a": {"team": "y"}, "c": {}}
    assert changed == ["a", "b", "a", "b", "c"]
