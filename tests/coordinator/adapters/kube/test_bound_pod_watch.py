"""The bound-pod watch's handler: a pod bound to a node holds its requests there until the watch
says it was deleted — whole, as the server sends the last state, or as bare metadata — or that
it ended."""

from __future__ import annotations

from typing import Any

import pytest

from common.kube import KubeClient
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.inventory.store import Inventory

NODE = "node-a"


def _node() -> dict[str, Any]:
    cap = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {
        "metadata": {"name": NODE, "uid": "node-uid", "resourceVersion": "1"},
        "status": {
            "capacity": cap,
            "allocatable": dict(cap),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid", "resourceVersion": "2"},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running", **status},
    }


@pytest.fixture
def synced() -> tuple[KubeSync, Inventory]:
    inventory = Inventory()
    sync = KubeSync(KubeClient.__new__(KubeClient), inventory)  # handlers only: never run
    sync._reflectors[0]._handler.replace([_node()])
    sync._reflectors[1]._handler.apply("ADDED", _pod())
    assert inventory.bound_pod("pod-uid") is not None
    return sync, inventory


@pytest.mark.parametrize(
    "deleted", [_pod(), {"metadata": {"uid": "pod-uid", "name": "p", "namespace": "ns"}}]
)
def test_a_deleted_pod_leaves_the_inventory(
    synced: tuple[KubeSync, Inventory], deleted: dict[str, Any]
) -> None:
    sync, inventory = synced
    sync._reflectors[1]._handler.apply("DELETED", deleted)
    assert inventory.bound_pod("pod-uid") is None


def test_a_pod_that_ended_leaves_the_inventory(synced: tuple[KubeSync, Inventory]) -> None:
    sync, inventory = synced
    sync._reflectors[1]._handler.apply("MODIFIED", _pod(phase="Succeeded"))
    assert inventory.bound_pod("pod-uid") is None


def test_a_pod_still_running_stays(synced: tuple[KubeSync, Inventory]) -> None:
    sync, inventory = synced
    sync._reflectors[1]._handler.apply("MODIFIED", _pod(podIP="10.0.0.1"))
    assert inventory.bound_pod("pod-uid") is not None
