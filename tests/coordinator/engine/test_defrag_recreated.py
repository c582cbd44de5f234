"""A moved pod is placed as its controller would recreate it: the inventory keeps a
controller-owned pod's scheduling fields (node selector and affinity, tolerations, spreading,
pod anti-affinity, requests — the pod-level ones too —, owner), and the pod rebuilt from them
asks what the original asked; a bare pod keeps none (it is never moved)."""

from __future__ import annotations

from typing import Any

from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.engine.gangs.running import recreated
from coordinator.inventory.translate import bound_pod
from devcluster.pods import pod

AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["web"]}]}
            ]
        }
    },
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"app": "web"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    },
}
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
]


def web(owned: bool = True) -> dict[str, Any]:
    obj = pod(
        "web-1",
        gpus=2,
        cpu="4",
        memory="16Gi",
        namespace="ml",
        labels={"app": "web"},
        node="n1",
        priority=7,
        node_selector={"gpu": "h100"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "web"}],
        affinity=AFFINITY,
        # pod-level requests (PodLevelResources) over the container's 4 CPUs
        spec={"topologySpreadConstraints": SPREAD, "resources": {"requests": {"cpu": "6"}}},
    )
    if owned:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web",
                "uid": "rs-1",
                "controller": True,
            }
        ]
    return obj


def test_the_recreated_pod_asks_what_the_running_one_asked() -> None:
    obj = web()
    bound = bound_pod(obj)
    assert bound is not None
    again = recreated(bound)
    original = parse_pod({**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "nodeName"}})
    assert isinstance(again, PodRequest)
    assert isinstance(original, PodRequest)
    for field in (
        "requests",
        "priority",
        "node_selector",
        "node_affinity",
        "pod_anti_affinity",
        "tolerations",
        "spread",
        "controller",
        "labels",
    ):
        assert getattr(again, field) == getattr(original, field), field
    assert again.node_name == ""  # placed afresh


def test_a_bare_pod_keeps_no_template() -> None:
    bound = bound_pod(web(owned=False))
    assert bound is not None
    assert bound.template == {}
    assert recreated(bound) is None
