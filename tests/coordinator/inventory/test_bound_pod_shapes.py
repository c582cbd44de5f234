"""Bound pods of one shape (a workload's template, on any node) are translated once, the next
ones from that translation with their own uid, name, node, volumes, deletion and start: each must
translate exactly as if translated alone — the cache emptied before it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from coordinator.inventory import translate
from coordinator.inventory.state import BoundPod
from coordinator.inventory.translate import bound_pod
from tests.support.sched_hw import pin_to_node


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    translate._SHAPES.clear()


def _pod(i: int, node: str, **status: Any) -> dict[str, Any]:
    token = f"kube-api-access-{i:05d}"
    return {
        "metadata": {
            "name": f"web-7d9f-{i:05d}",
            "namespace": "shop",
            "uid": f"uid-{i}",
            "labels": {"app": "web"},
            "annotations": {"topos.io/gpu-locality": "any"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f"}
                | {"uid": "rs-1", "controller": True}
            ],
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "topos",
            "priority": 100,
            "containers": [
                {
                    "name": "app",
                    "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
                    "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}],
                    "volumeMounts": [{"name": token, "mountPath": "/var/run/secrets"}],
                }
            ],
            "volumes": [
                {"name": token, "projected": {"sources": []}},
                {"name": "cache", "ephemeral": {"volumeClaimTemplate": {}}},
            ],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Running", **status},
    }


def _alone(obj: dict[str, Any]) -> BoundPod | None:
    translate._SHAPES.clear()
    return bound_pod(copy.deepcopy(obj))


def test_the_pods_of_one_workload_translate_as_each_alone_on_their_own_nodes() -> None:
    pods = [
        _pod(0, "node-a", startTime="2026-12-01T10:00:00Z"),
        _pod(1, "node-b"),
        _pod(2, "node-c", startTime="2026-12-01T10:00:05Z"),
    ]
    pods[2]["metadata"]["deletionTimestamp"] = "2026-12-01T10:01:00Z"
    got = [bound_pod(p) for p in pods]
    assert len(translate._SHAPES) == 1  # nodes and token volumes differ, nothing else
    for obj, pod in zip(pods, got, strict=True):
        assert pod is not None
        assert pod == _alone(obj)
    assert [(p.uid, p.name, p.node) for p in got if p] == [
        ("uid-0", "web-7d9f-00000", "node-a"),
        ("uid-1", "web-7d9f-00001", "node-b"),
        ("uid-2", "web-7d9f-00002", "node-c"),
    ]
    assert [p.volume_claims for p in got if p] == [
        ("web-7d9f-00000-cache",),
        ("web-7d9f-00001-cache",),
        ("web-7d9f-00002-cache",),
    ]
    assert [p.terminating for p in got if p] == [False, False, True]
    assert [p.started_at is None for p in got if p] == [False, True, False]
    assert got[1] is not None
    assert got[1].requests == {"cpu": 250, "memory": 2**30}
    assert got[1].owner_uid == "rs-1"


def test_another_annotation_is_another_shape() -> None:
    a, b = _pod(0, "node-a"), _pod(1, "node-a")
    b["metadata"]["annotations"]["topos.io/assigned-gpus"] = "GPU-1"
    got = [bound_pod(a), bound_pod(b)]
    assert len(translate._SHAPES) == 2
    assert [p.assigned_gpus for p in got if p] == [(), ("GPU-1",)]
    assert got[1] == _alone(b)


def test_an_ended_pod_holds_nothing_whatever_its_shape() -> None:
    assert bound_pod(_pod(0, "node-a")) is not None
    assert bound_pod(_pod(1, "node-a", phase="Succeeded")) is None


def test_a_daemonsets_pods_keep_their_own_node_affinity_in_their_placement_template() -> None:
    pods = [pin_to_node(_pod(i, node), node) for i, node in enumerate(("node-a", "node-b"))]
    got = [bound_pod(p) for p in pods]
    assert len(translate._SHAPES) == 1
    for obj, pod in zip(pods, got, strict=True):
        assert pod == _alone(obj)
    pinned = [p.template["spec"]["affinity"]["nodeAffinity"] for p in got if p]
    assert [
        a["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][
            0
        ]["values"]
        for a in pinned
    ] == [["node-a"], ["node-b"]]
