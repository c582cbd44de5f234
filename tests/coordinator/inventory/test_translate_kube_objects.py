"""Node and Pod JSON → inventory records: readiness, cordons, taints, allocatable in canonical
units; pod requests the way kube-scheduler counts them (init containers, sidecars, overhead,
limits-only extended resources); finished or unbound pods hold nothing; odd quantities don't
crash the coordinator."""

from __future__ import annotations

import json
from typing import Any

from agent.devices import discover_profile
from common.labeling import labels
from coordinator.inventory.translate import (
    TopologyMemo,
    bound_pod,
    bound_pod_fields,
    kube_node,
    node_fields,
)


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """What the bound pod holds on its node."""
    bound = bound_pod(pod)
    assert bound is not None
    return dict(bound.requests)


def _pod(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", **meta},
        "spec": {"nodeName": "gpu-1", **spec},
        "status": {"phase": "Running"},
    }


def _container(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "image": "x", "resources": resources, **extra}


def test_node_allocatable_readiness_cordon_and_taints() -> None:
    node = kube_node(
        {
            "metadata": {
                "name": "gpu-1",
                "labels": {"topos.io/leaf": "leaf-3"},
                "resourceVersion": "42",
            },
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}],
            },
            "status": {
                "allocatable": {
                    "cpu": "63500m",
                    "memory": "500Gi",
                    "nvidia.com/gpu": "8",
                    "pods": "110",
                },
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ],
            },
        }
    )
    assert node.allocatable == {
        "cpu": 63500,
        "memory": 500 * 2**30,
        "nvidia.com/gpu": 8,
        "pods": 110,
    }
    assert node.ready
    assert node.unschedulable
    assert node.taints[0].key == "nvidia.com/gpu"
    assert node.labels["topos.io/leaf"] == "leaf-3"
    assert not kube_node({"metadata": {"name": "n"}, "status": {}}).ready  # no Ready condition


def test_requests_follow_kube_scheduler_accounting() -> None:
    pod = _pod(
        {
            "containers": [
                _container({"cpu": "500m", "memory": "1Gi"}, {"nvidia.com/gpu": "2"}),
                _container({"cpu": "1"}),
            ],
            "initContainers": [
                _container({"cpu": "4", "memory": "512Mi"}),  # runs alone, before the app
                _container({"cpu": "250m"}, restartPolicy="Always"),  # a sidecar: runs beside
            ],
            "overhead": {"cpu": "100m"},
        }
    )
    req = pod_requests(pod)
    # app 1.5 CPU + sidecar 0.25 = 1.75 < the init container's 4 (+0 sidecars started before it)
    assert req["cpu"] == 4000 + 100
    assert req["memory"] == 2**30
    assert req["nvidia.com/gpu"] == 2  # limits-only extended resource


def test_explicit_requests_win_over_limits() -> None:
    req = pod_requests(_pod({"containers": [_container({"cpu": "1"}, {"cpu": "4"})]}))
    assert req == {"cpu": 1000}


def test_finished_or_unbound_pods_hold_no_capacity() -> None:
    done = _pod({"containers": [_container({"cpu": "1"})]})
    done["status"]["phase"] = "Succeeded"
    assert bound_pod(done) is None
    failed = dict(done, status={"phase": "Failed"})
    assert bound_pod(failed) is None
    pending = _pod({"containers": [_container({"cpu": "1"})]})
    del pending["spec"]["nodeName"]
    assert bound_pod(pending) is None


def test_bound_pod_of_any_scheduler_with_assigned_gpus() -> None:
    pod = bound_pod(
        _pod(
            {
                "schedulerName": "volcano",
                "containers": [_container(limits={"nvidia.com/gpu": "1"})],
                "priority": 1000,
            },
            annotations={"topos.io/assigned-gpus": "GPU-a, GPU-b", "unrelated": "x"},
        )
    )
    assert pod is not None
    assert pod.scheduler == "volcano"
    assert pod.assigned_gpus == ("GPU-a", "GPU-b")
    assert pod.priority == 1000
    assert pod.requests == {"nvidia.com/gpu": 1}
    assert "unrelated" not in pod.annotations


def test_garbage_quantities_are_skipped_not_fatal() -> None:
    req = pod_requests(
        _pod({"containers": [_container({"cpu": "lots", "memory": "-1Gi", "example.com/x": "3"})]})
    )
    assert req == {"example.com/x": 3}
    node = kube_node(
        {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "??", "pods": "10"}}}
    )
    assert node.allocatable == {"pods": 10}


def test_what_the_watch_keeps_of_nodes_and_pods_translates_the_same() -> None:
    published = labels(discover_profile("dgx-h100", hostname="gpu-9"))
    node = {
        "metadata": {
            "name": "gpu-9",
            "resourceVersion": "7",
            "labels": published.labels,
            "annotations": {**published.annotations, "other": "x"},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"},
            "capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"},
            ],
            "nodeInfo": {"kubeletVersion": "v1.36.3"},
        },
    }
    slim = kube_node(node_fields(node))
    assert slim == kube_node(node)
    assert slim.topology is not None
    assert slim.ready
    pod = _pod(
        {
            "containers": [_container({"cpu": "1"}, {"nvidia.com/gpu": "2"})],
            "affinity": {"podAntiAffinity": {"x": 1}},
        },
        labels={"app": "a"},
        annotations={"topos.io/assigned-gpus": "GPU-1,GPU-2", "note": "n"},
        ownerReferences=[{"uid": "job-1", "controller": True}],
        managedFields=[{"manager": "kubectl"}],
    )
    pod["status"]["containerStatuses"] = [{"name": "c", "ready": True}]
    assert bound_pod(bound_pod_fields(pod)) == bound_pod(pod)
    assert bound_pod(bound_pod_fields(pod)).owner_uid == "job-1"  # type: ignore[union-attr]


def test_alike_machines_share_their_topology_parts_and_read_the_same() -> None:
    memo = TopologyMemo()
    nodes = []
    for name in ("gpu-a", "gpu-b"):
        published = labels(discover_profile("dgx-h100", hostname=name))
        obj = {"metadata": {"name": name, "annotations": published.annotations}}
        nodes.append((kube_node(obj, memo), kube_node(obj)))
    (a, plain_a), (b, _) = nodes
    assert a.topology == plain_a.topology  # the same topology, GPU UUIDs included
    assert a.topology is not None
    assert b.topology is not None
    assert a.topology.gpus[0].uuid != b.topology.gpus[0].uuid
    assert a.topology.numa_nodes is b.topology.numa_nodes  # held once for both


def test_alike_nodes_share_their_resource_maps_and_a_different_node_keeps_its_own() -> None:
    memo = TopologyMemo()

    def node(name: str, memory: str) -> dict[str, Any]:
        status = {"allocatable": {"cpu": "64", "memory": memory, "nvidia.com/gpu": "8"}}
        labels = {"kubernetes.io/hostname": name, "topos.io/gpu.product": "H100"}
        return {"metadata": {"name": name, "labels": labels}, "status": status}

    a, b = kube_node(node("gpu-a", "1Ti"), memo), kube_node(node("gpu-b", "1Ti"), memo)
    small = kube_node(node("gpu-c", "512Gi"), memo)
    assert a.allocatable is b.allocatable  # held once for alike machines
    assert a.allocatable["memory"] == 2**40
    assert small.allocatable["memory"] == 2**39  # its own, not its neighbours'
    assert b.labels == {"kubernetes.io/hostname": "gpu-b", "topos.io/gpu.product": "H100"}
    resized = kube_node(node("gpu-a", "2Ti"), memo)  # a Node update: only that node changes
    assert (resized.allocatable["memory"], b.allocatable["memory"]) == (2**41, 2**40)
    relabelled = node("gpu-b", "1Ti")
    relabelled["metadata"]["labels"]["zone"] = "z1"
    assert kube_node(relabelled, memo).labels["zone"] == "z1"
    for name in ("bad-1", "bad-2"):  # a bad quantity is skipped on every node that has it
        bad = kube_node(node(name, "lots"), memo)
        assert "memory" not in bad.allocatable
        assert bad.allocatable["cpu"] == 64_000


def test_a_broken_topology_is_refused_after_alike_valid_ones_were_listed() -> None:
    """Valid link matrices are remembered (alike machines are checked once); a node whose
    matrix or CPU list is broken is still refused, with the reason on the node."""
    memo = TopologyMemo()
    published = labels(discover_profile("dgx-h100", hostname="gpu-ok"))
    ok = {"metadata": {"name": "gpu-ok", "annotations": published.annotations}}
    assert kube_node(ok, memo).topology is not None
    text = published.annotations["topos.io/topology"]
    topology = json.loads(text)
    topology["links"][0][1] = "SYS" if topology["links"][0][1] != "SYS" else "PIX"
    broken = {
        "metadata": {"name": "gpu-bad", "annotations": {"topos.io/topology": json.dumps(topology)}}
    }
    node = kube_node(broken, memo)
    assert node.topology is None
    assert node.topology_error is not None
    assert "not symmetric" in node.topology_error
    topology = json.loads(text)
    topology["gpus"][0]["cpu_affinity"] = [0, 9999]
    wide = {
        "metadata": {"name": "gpu-cpu", "annotations": {"topos.io/topology": json.dumps(topology)}}
    }
    node = kube_node(wide, memo)
    assert node.topology is None
    assert node.topology_error is not None
    assert "names CPU 9999" in node.topology_error
