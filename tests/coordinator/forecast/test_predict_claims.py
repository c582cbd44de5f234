"""A predicted start for a pod with PersistentVolumeClaims or DRA ResourceClaims: the copy carries
the claims, PVs, StorageClasses, DeviceClasses and ResourceSlices, so the forward run refuses or
delays the pods the live scheduler does — and a pod waiting for a claim to be made has no
forecast ("start unknown", with why), never "now"."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.forecast.predict import (
    ClusterCopy,
    NodeCopy,
    RunningCopy,
    predict_start,
    predict_starts,
)
from coordinator.forecast.runtimes import Runtime
from devcluster.dra import claim as dra_claim
from devcluster.dra import claim_pod
from devcluster.pods import pod
from tests.support.dra import allocated_on, gpu_class, node_slice
from tests.support.volumes import claim, local_pv, storage_class

HOUR = 3_600.0


def node(name: str) -> NodeCopy:
    """A node with room for one of :func:`big` (the GPUs are DRA devices here)."""
    obj = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return NodeCopy(obj)


def big(name: str, **kw: Any) -> dict[str, Any]:
    """A pod filling a whole :func:`node`."""
    return pod(name, cpu="12", memory="8Gi", **kw)


def with_claim(name: str, claim_name: str) -> dict[str, Any]:
    return big(
        name,
        spec={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]},
    )


# --- PersistentVolumeClaims -----------------------------------------------------------------


def test_a_pod_whose_claim_is_bound_to_a_pv_on_a_full_node_waits_for_that_node() -> None:
    """gpu-1 is free, but the pod's data lives on gpu-0: it starts when gpu-0's pod ends."""
    copy = ClusterCopy(
        nodes=[node("gpu-0"), node("gpu-1")],
        running=[RunningCopy(big("busy", node="gpu-0"), Runtime(1_800, "annotation"))],
        pending=[with_claim("reader", "data")],
        volumes=[
            ("StorageClass", storage_class("local")),
            ("PersistentVolume", local_pv("pv-0", "gpu-0", claim_ref=("data", "uid-data"))),
            ("PersistentVolumeClaim", claim("data", volume="pv-0", bound=True)),
        ],
    )
    p = predict_start(copy, "default/reader")
    assert p.node == "gpu-0"
    assert p.starts_in_s == pytest.approx(1_800, abs=15)
    assert p.after == ("default/busy",)


def test_a_pod_whose_immediate_claim_is_unbound_has_an_unknown_start() -> None:
    """kube-scheduler refuses a pod whose Immediate claim no PV is bound to yet, on every node,
    until the PV controller (or a provisioner) binds it — at a time no copy knows."""
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        pending=[with_claim("reader", "data")],
        volumes=[
            ("StorageClass", storage_class("fast", mode="Immediate", provisioner="csi.example")),
            ("PersistentVolumeClaim", claim("data", cls="fast")),
        ],
    )
    p = predict_start(copy, "default/reader")
    assert p.starts_in_s is None
    assert p.message == "start unknown: pod has unbound immediate PersistentVolumeClaims"


def test_a_pod_whose_claim_does_not_exist_or_is_being_deleted_has_an_unknown_start() -> None:
    going = claim("going", volume="pv-0", bound=True, deletionTimestamp="2026-01-01T00:00:00Z")
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        pending=[with_claim("reader", "missing"), with_claim("writer", "going")],
        volumes=[
            ("StorageClass", storage_class("local")),
            ("PersistentVolume", local_pv("pv-0", "gpu-0", claim_ref=("going", "uid-going"))),
            ("PersistentVolumeClaim", going),
        ],
    )
    got = predict_starts(copy)
    assert got["default/reader"].message == (
        'start unknown: persistentvolumeclaim "missing" not found'
    )
    assert got["default/writer"].unknown == 'persistentvolumeclaim "going" is being deleted'


def test_a_waiting_claim_takes_a_free_local_pv_on_the_node_it_reaches() -> None:
    """A WaitForFirstConsumer claim: the run picks the node whose available PV fits, and starts
    the pod now."""
    copy = ClusterCopy(
        nodes=[node("gpu-0"), node("gpu-1")],
        pending=[with_claim("writer", "scratch")],
        volumes=[
            ("StorageClass", storage_class("local")),
            ("PersistentVolume", local_pv("pv-1", "gpu-1")),
            ("PersistentVolumeClaim", claim("scratch")),
        ],
    )
    p = predict_start(copy, "default/writer")
    assert (p.node, p.message) == ("gpu-1", "expected to start now")


# --- DRA ResourceClaims ---------------------------------------------------------------------


def dra_objects(
    *claims: dict[str, Any], nodes: tuple[str, ...] = ("dra-0",)
) -> list[tuple[Any, dict[str, Any]]]:
    return [
        ("DeviceClass", gpu_class()),
        *(("ResourceSlice", node_slice(n, "dgx-h100")) for n in nodes),
        *(("ResourceClaim", c) for c in claims),
    ]


def gpu_pod(name: str, **kw: Any) -> dict[str, Any]:
    return claim_pod(name, namespace="default", scheduler="topos", **kw)


def gpu_claim(name: str, gpus: int) -> dict[str, Any]:
    return dra_claim(name, gpus, namespace="default")


def test_a_dra_claim_that_fits_starts_now_with_its_devices() -> None:
    copy = ClusterCopy(
        nodes=[node("dra-0")],
        pending=[gpu_pod("infer", claim_name="infer-gpus")],
        dra=dra_objects(gpu_claim("infer-gpus", 4)),
    )
    p = predict_start(copy, "default/infer")
    assert (p.node, p.message) == ("dra-0", "expected to start now")


def test_a_dra_claim_no_device_can_satisfy_has_no_start() -> None:
    """Sixteen GPUs of a class whose nodes have eight each: no end frees enough."""
    copy = ClusterCopy(
        nodes=[node("dra-0"), node("dra-1")],
        pending=[gpu_pod("huge", claim_name="huge-gpus")],
        dra=dra_objects(gpu_claim("huge-gpus", 16), nodes=("dra-0", "dra-1")),
    )
    p = predict_start(copy, "default/huge", horizon_s=HOUR)
    assert p.starts_in_s is None
    assert p.message == "no start expected within 60 min"


def test_a_dra_claim_starts_when_the_pod_holding_the_devices_ends() -> None:
    """The running pod's claim holds all eight devices (allocated, reserved for it): the
    pending pod's claim is allocated once that pod ends and its claim is released."""
    held = gpu_claim("held", 8)
    held["status"] = {
        "allocation": allocated_on("dra-0", [f"gpu-{i}" for i in range(8)]),
        "reservedFor": [{"resource": "pods", "name": "holder", "uid": "uid-holder"}],
    }
    holder = gpu_pod("holder", claim_name="held")
    holder["metadata"]["uid"] = "uid-holder"
    holder["spec"]["nodeName"] = "dra-0"
    copy = ClusterCopy(
        nodes=[node("dra-0")],
        running=[RunningCopy(holder, Runtime(2_400, "annotation"))],
        pending=[gpu_pod("next", claim_name="next-gpus")],
        dra=dra_objects(held, gpu_claim("next-gpus", 2)),
    )
    p = predict_start(copy, "default/next")
    assert p.node == "dra-0"
    assert p.starts_in_s == pytest.approx(2_400, abs=15)
    assert p.after == ("default/holder",)


def test_a_pod_whose_claim_is_not_made_yet_has_an_unknown_start() -> None:
    """Its claim is made from a template (by kube-controller-manager) or by its user: the
    scheduler does not try it until then, and no copy knows when that is or what it asks."""
    made_later = gpu_pod("from-template", template="two-gpus")
    named = gpu_pod("named", claim_name="not-yet")
    copy = ClusterCopy(nodes=[node("dra-0")], pending=[made_later, named], dra=dra_objects())
    got = predict_starts(copy)
    assert got["default/from-template"].starts_in_s is None
    assert got["default/from-template"].message == (
        "start unknown: waiting for resource claim gpus (template two-gpus) to be created"
    )
    assert got["default/named"].unknown == "waiting for resource claim not-yet to be created"


def test_a_pod_whose_template_claim_was_made_is_forecast_with_it() -> None:
    """The claim kube-controller-manager made (``status.resourceClaimStatuses``) is the one
    the run allocates."""
    obj = gpu_pod("from-template", template="two-gpus")
    obj["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "from-template-gpus-x1"}],
    }
    copy = ClusterCopy(
        nodes=[node("dra-0")],
        pending=[obj],
        dra=dra_objects(gpu_claim("from-template-gpus-x1", 2)),
    )
    p = predict_start(copy, "default/from-template")
    assert (p.node, p.message) == ("dra-0", "expected to start now")
