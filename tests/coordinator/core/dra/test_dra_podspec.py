"""What a pod says about DRA: its claim references, the claims the control plane made for it, and
its per-container extended resources (named as kube-scheduler names KEP-5004 requests)."""

from __future__ import annotations

from coordinator.core.podspec.claims import PodClaim
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from devcluster.pods import pod


def test_claim_references_and_generated_names() -> None:
    obj = pod("p")
    obj["spec"]["resourceClaims"] = [
        {"name": "a", "resourceClaimName": "mine"},
        {"name": "b", "resourceClaimTemplateName": "tpl"},
        {"name": "c", "resourceClaimTemplateName": "tpl"},
    ]
    obj["status"] = {
        "resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x7k"}],
        "extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-q"},
    }
    got = parse_pod(obj)
    assert isinstance(got, PodRequest)
    assert got.claims == (
        PodClaim("a", claim_name="mine"),
        PodClaim("b", template_name="tpl", generated_name="p-b-x7k"),
        PodClaim("c", template_name="tpl"),
    )
    assert [c.resolved_name for c in got.claims] == ["mine", "p-b-x7k", ""]
    assert got.extended_claim == "p-extended-resources-q"


def test_a_claim_entry_naming_both_or_neither_is_invalid() -> None:
    for entry in (
        {"name": "x", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
        {"name": "x"},
    ):
        obj = pod("p")
        obj["spec"]["resourceClaims"] = [entry]
        got = parse_pod(obj)
        assert isinstance(got, PodSpecError)
        assert got.field == "spec.resourceClaims[0]"


def test_extended_resources_are_named_by_container_and_sorted_position() -> None:
    obj = pod("p", gpus=2)
    obj["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "busybox",
            "resources": {"limits": {"example.com/dongle": "1"}},
        }
    ]
    obj["spec"]["containers"].append(
        {
            "name": "side",
            "image": "busybox",
            "resources": {
                "requests": {"cpu": "1", "deviceclass.resource.kubernetes.io/fpga": "3"},
            },
        }
    )
    got = parse_pod(obj)
    assert isinstance(got, PodRequest)
    assert [(e.container, e.resource, e.count, e.request_name) for e in got.container_extended] == [
        ("init", "example.com/dongle", 1, "container-0-request-0"),
        ("main", "nvidia.com/gpu", 2, "container-1-request-2"),
        ("side", "deviceclass.resource.kubernetes.io/fpga", 3, "container-2-request-1"),
    ]
