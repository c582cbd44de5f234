"""Watch events that change nothing the scheduler uses stop at the inventory's door: a Node status
heartbeat and a bound pod turning Running raise no inventory event (so no node is rebuilt and no
pod requeued) and are counted as ``unchanged``; a label, allocatable or topology change still
reaches the scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agent.devices import discover_profile
from common import labels as keys
from common.kube import NODES, PODS, KubeClient
from common.labeling import labels
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.inventory.store import Inventory, InventoryEvent
from devcluster.pods import gpu_pod
from tests.support.inventory_wait import until

pytestmark = pytest.mark.kube


def _heartbeat(at: str) -> dict[str, object]:
    """What a kubelet (or KWOK) writes every few seconds: only times move."""
    return {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": at,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
    }


async def test_heartbeats_and_pod_status_churn_raise_no_inventory_event(
    kube: KubeClient, namespace: str, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("beat")
    published = labels(discover_profile("dgx-h100", hostname=node))
    await kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": {**published.labels, "stage": "old"},
                "annotations": dict(published.annotations),
            },
        },
    )
    status = {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "pods": "110"}}
    await kube.patch(NODES, node, {"status": status}, subresource="status")
    await kube.patch(NODES, node, _heartbeat("2026-01-01T00:00:10Z"), subresource="status")
    await kube.patch(NODES, node, {"spec": {"taints": None}})  # the not-ready admission taint
    await kube.create(
        PODS,
        gpu_pod("bound", 1, node=node, scheduler=None, labels={"stage": "old"}),
        namespace=namespace,
    )

    inv = Inventory(stale_ttl_s=30)
    seen: list[tuple[str | None, tuple[str, ...]]] = []  # at each event: node label, pod labels

    def record(event: InventoryEvent) -> None:
        if event.node != node:
            return
        state = inv.node(node)
        pods = tuple(p.labels.get("stage", "") for p in inv.bound_pods(node))
        seen.append((None if state is None else state.labels.get("stage"), pods))

    sync = KubeSync(kube, inv)
    task = asyncio.create_task(sync.run())
    try:
        # Both watches have caught up with every write above (the pod may arrive before its
        # Node does; the Node's allocatable and taint writes come after its first version).
        await until(
            inv,
            lambda: (
                any(p.name == "bound" for p in inv.bound_pods(node))
                and inv.node(node).topology is not None  # type: ignore[union-attr]
                and inv.node(node).free_gpus == 7  # type: ignore[union-attr]
                and not inv.node(node).taints  # type: ignore[union-attr]
            ),
        )
        topology = inv.node(node).topology  # type: ignore[union-attr]
        assert topology is not None
        assert len(topology.gpus) == 8
        inv.subscribe(record)
        unchanged = dict(sync.events)

        # Nothing the scheduler uses: a heartbeat, the pod going Running.
        await kube.patch(NODES, node, _heartbeat("2026-01-01T00:00:20Z"), subresource="status")
        await kube.patch(
            PODS,
            "bound",
            {"status": {"phase": "Running", "podIP": "10.0.0.7", "conditions": []}},
            namespace=namespace,
            subresource="status",
        )
        # Then real changes: a node label, a pod label, allocatable.
        await kube.patch(NODES, node, {"metadata": {"labels": {"stage": "new"}}})
        await kube.patch(
            PODS, "bound", {"metadata": {"labels": {"stage": "new"}}}, namespace=namespace
        )
        await until(inv, lambda: [p.labels.get("stage") for p in inv.bound_pods(node)] == ["new"])
        status = {"allocatable": {"nvidia.com/gpu": "4", "cpu": "64", "pods": "110"}}
        await kube.patch(NODES, node, {"status": status}, subresource="status")
        await until(inv, lambda: inv.node(node).free_gpus == 3)  # type: ignore[union-attr]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # Every event came with a real change: none while the node still read "old" (the heartbeat,
    # the pod going Running); the pod's own label change, the allocatable change came through.
    assert seen
    assert all(label == "new" for label, _ in seen), seen
    assert seen[-1] == ("new", ("new",))
    assert sync.events["nodes", "unchanged"] > unchanged.get(("nodes", "unchanged"), 0)
    assert sync.events["bound pods", "unchanged"] > unchanged.get(("bound pods", "unchanged"), 0)
    # The topology was not lost on the heartbeats, and is the one published.
    assert inv.node(node).topology == topology  # type: ignore[union-attr]
    assert keys.TOPOLOGY in published.annotations
