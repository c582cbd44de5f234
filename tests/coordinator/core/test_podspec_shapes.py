"""Pods of one shape (a workload's template) are read once, the next ones from that reading with
their own name, uid, volumes and claims: each must read exactly as if read alone — the cache
emptied before it — whether the shape was seen before or not, and a bad pod of a known shape
must still be refused, naming its key."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from coordinator.core.podspec import parse
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from tests.support.sched_hw import pin_to_node


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    parse._SHAPES.clear()


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    """A ReplicaSet's pod as the API server holds it once the ServiceAccount admission ran: a
    token volume named per pod, mounted in its container."""
    token = f"kube-api-access-{name[-5:]}"
    body: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "app:1",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                "volumeMounts": [{"name": token, "mountPath": "/var/run/secrets/token"}],
            }
        ],
        "volumes": [{"name": token, "projected": {"sources": []}}],
        "schedulerName": "topos",
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
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
    }
    body.update(spec)
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": f"uid-{name}",
            "labels": {"app": "web", "pod-template-hash": "7d9f"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f"}
                | {"uid": "rs-1", "controller": True}
            ],
        },
        "spec": body,
        "status": {"phase": "Pending"},
    }


def _alone(obj: dict[str, Any]) -> PodRequest | PodSpecError:
    parse._SHAPES.clear()
    return parse_pod(copy.deepcopy(obj))


def test_the_pods_of_one_workload_read_as_each_alone_with_their_own_name_and_uid() -> None:
    pods = [_pod(f"web-7d9f-{i:05d}") for i in range(3)]
    read = [parse_pod(p) for p in pods]
    assert len(parse._SHAPES) == 1  # one shape: the token volumes differ, nothing else
    for obj, got in zip(pods, read, strict=True):
        assert isinstance(got, PodRequest)
        assert got == _alone(obj)
        assert (got.name, got.uid) == (obj["metadata"]["name"], obj["metadata"]["uid"])
    assert read[1].requests == {"cpu": 500, "memory": 2**30}
    assert read[1].pod_anti_affinity == read[0].pod_anti_affinity != ()


def test_a_pods_volume_claims_and_resource_claims_are_its_own() -> None:
    first = _pod("job-a-00001", resourceClaims=[{"name": "gpu", "resourceClaimName": "shared"}])
    second = copy.deepcopy(first)
    second["metadata"] |= {"name": "job-a-00002", "uid": "uid-2"}
    for obj in (first, second):  # an ephemeral volume's claim is named after its pod
        obj["spec"]["volumes"].append({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}})
    second["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "job-a-00002-ext"}
    a, b = parse_pod(first), parse_pod(second)
    assert isinstance(a, PodRequest)
    assert isinstance(b, PodRequest)
    assert [c.name for c in a.volume_claims] == ["job-a-00001-scratch"]
    assert [c.name for c in b.volume_claims] == ["job-a-00002-scratch"]
    assert (a.extended_claim, b.extended_claim) == ("", "job-a-00002-ext")
    assert b == _alone(second)
    assert a == _alone(first)


def test_a_bare_pod_naming_a_placement_is_a_group_named_after_itself_each_time() -> None:
    pods = [_pod(f"solo-{i}") for i in range(2)]
    for obj in pods:
        obj["metadata"]["annotations"] = {"topos.io/placement": "consolidated"}
        del obj["metadata"]["ownerReferences"]
    gangs = [parse_pod(p) for p in pods]
    assert [g.gang.name for g in gangs if isinstance(g, PodRequest) and g.gang] == [
        "solo-0",
        "solo-1",
    ]


def test_a_bad_pod_of_a_known_shape_is_refused_naming_its_key() -> None:
    assert isinstance(parse_pod(_pod("web-7d9f-00001")), PodRequest)
    bad = _pod("web-7d9f-00002")
    bad["spec"]["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": ""}})
    got = parse_pod(bad)
    assert isinstance(got, PodSpecError)
    assert got.pod_key == "shop/web-7d9f-00002"
    assert got.field.startswith("spec.volumes[1]")
    assert parse_pod(_pod("web-7d9f-00003")) == _alone(_pod("web-7d9f-00003"))  # others unharmed


def test_a_different_label_annotation_or_request_is_another_shape() -> None:
    base = _pod("web-7d9f-00001")
    relabelled = _pod("web-7d9f-00002")
    relabelled["metadata"]["labels"]["tier"] = "gold"
    bigger = _pod("web-7d9f-00003")
    bigger["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    read = [parse_pod(p) for p in (base, relabelled, bigger)]
    assert len(parse._SHAPES) == 3
    assert [r.labels.get("tier") for r in read if isinstance(r, PodRequest)] == [None, "gold", None]
    assert [r.requests["cpu"] for r in read if isinstance(r, PodRequest)] == [500, 500, 2000]


def test_a_daemonsets_pods_pinned_each_to_its_node_share_a_shape_with_their_own_affinity() -> None:
    pods = [
        pin_to_node(_pod(f"agent-{i:05d}"), node) for i, node in enumerate(("node-a", "node-b"))
    ]
    read = [parse_pod(p) for p in pods]
    assert len(parse._SHAPES) == 1
    for obj, got in zip(pods, read, strict=True):
        assert got == _alone(obj)
    assert [
        r.node_affinity.required[0].match_fields[0].values
        for r in read
        if isinstance(r, PodRequest) and r.node_affinity and r.node_affinity.required
    ] == [("node-a",), ("node-b",)]
