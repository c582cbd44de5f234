"""One rule for what a pod requests of its node, for pods waiting (``parse_pod``, strict) and pods
already running (the inventory's ``bound_pod`` and the snapshot's ``PodInfo`` built from it,
lenient).

The inventory used to keep its own copy of the rule: a malformed container there crashed the
translation, and the snapshot's lenient copy forgot every resource of a running pod as soon as one
of its quantities was malformed, so its node looked emptier than it was."""

from __future__ import annotations

from typing import Any

from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.inventory.translate import bound_pod
from tests.support.sched_hw import bound_info


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"nodeName": "gpu-1", **spec},
        "status": {"phase": "Running"},
    }


def _c(requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests or {}}, **extra}


def _all_three(pod: dict[str, Any]) -> list[dict[str, int]]:
    request = parse_pod(pod)
    assert isinstance(request, PodRequest), request
    bound = bound_pod(pod)
    info = bound_info(pod)
    assert bound is not None
    assert info is not None
    return [dict(request.requests), dict(bound.requests), dict(info.requests)]


def test_sidecars_init_containers_and_overhead_count_alike_everywhere() -> None:
    pod = _pod(
        {
            "containers": [_c({"cpu": "500m", "memory": "1Gi"})],
            "initContainers": [
                _c({"cpu": "1"}, restartPolicy="Always"),  # a sidecar, beside everything after
                _c({"cpu": "2", "memory": "512Mi"}),  # runs beside the sidecar: 3 CPUs at peak
                _c({"memory": "4Gi"}, restartPolicy="Always"),  # second sidecar
            ],
            "overhead": {"cpu": "100m"},
        }
    )
    expected = {"cpu": 3000 + 100, "memory": 5 * 2**30}
    assert _all_three(pod) == [expected, expected, expected]


def test_zero_requests_are_left_out_everywhere() -> None:
    pod = _pod({"containers": [_c({"cpu": "0", "memory": "1Gi", "example.com/fpga": "0"})]})
    assert _all_three(pod) == [{"memory": 2**30}] * 3


def test_a_running_pod_with_one_malformed_quantity_still_holds_the_rest() -> None:
    pod = _pod({"containers": [_c({"cpu": "lots", "memory": "2Gi"})]})
    assert isinstance(parse_pod(pod), PodSpecError)  # a waiting pod: named and refused
    info = bound_info(pod)
    bound = bound_pod(pod)
    assert info is not None
    assert bound is not None
    assert dict(info.requests) == {"memory": 2 * 2**30}  # was {}: the node looked empty
    assert dict(bound.requests) == {"memory": 2 * 2**30}


def test_malformed_containers_of_a_running_pod_are_skipped_not_fatal() -> None:
    pod = _pod({"containers": ["not a container", _c({"cpu": "1"})], "initContainers": {"x": 1}})
    bound = bound_pod(pod)  # crashed the inventory's translation before
    info = bound_info(pod)
    assert bound is not None
    assert info is not None
    assert dict(bound.requests) == dict(info.requests) == {"cpu": 1000}
    error = parse_pod(pod)
    assert isinstance(error, PodSpecError)
    assert error.field == "spec.containers[0]"


def test_pod_level_requests_replace_the_containers_cpu_and_memory_everywhere() -> None:
    """PodLevelResources (beta, on since 1.34): ``spec.resources.requests`` is what the pod asks
    for cpu, memory and hugepages, whatever its containers say; other resources stay the
    containers' sum, and the overhead is added on top — as kube-scheduler's PodRequests."""
    pod = _pod(
        {
            "resources": {
                "requests": {"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "4Mi"},
                "limits": {"cpu": "4"},
            },
            "containers": [
                _c({"cpu": "500m", "memory": "4Gi", "example.com/fpga": "1"}),
                _c({"cpu": "250m"}),
            ],
            "overhead": {"cpu": "100m"},
        }
    )
    expected = {"cpu": 2100, "memory": 2**30, "hugepages-2Mi": 4 * 2**20, "example.com/fpga": 1}
    assert _all_three(pod) == [expected, expected, expected]


def test_pod_level_requests_of_one_resource_leave_the_others_to_the_containers() -> None:
    pod = _pod({"resources": {"requests": {"memory": "8Gi"}}, "containers": [_c({"cpu": "3"})]})
    assert _all_three(pod) == [{"cpu": 3000, "memory": 8 * 2**30}] * 3
