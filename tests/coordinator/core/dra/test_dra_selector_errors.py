"""CEL selectors that fail at run time, and deep ones that do not.

A selector the API server accepts can still fail on a device: kube-scheduler then stops the
pod's attempt with cel-go's error, naming the claim (or the DeviceClass) and the selector — it
is never "no device free". The evaluator raises cel-go's text; the allocator and the scheduling
cycle turn it into kube-scheduler's message, with the request and the device added. Selectors
nested as deep as the API server accepts (248 levels, tests/e2e_dra/test_e2e_dra_selector_errors.py
shows it refusing 249) evaluate as Kubernetes evaluates them.
"""

from __future__ import annotations

import sys

import pytest

from coordinator.core.dra.allocator import AllocationFailure, FirstFit, allocate
from coordinator.core.dra.cel import compile_selector
from coordinator.core.dra.values import CelRuntimeError
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Code
from tests.coordinator.core.dra.dra_objects import (
    claim,
    claim_pod,
    device_class,
    exactly,
    gpu_slice,
    state,
)
from tests.coordinator.core.dra.test_dra_objects import a_device
from tests.support.sched_hw import dgx1, gpu_node

GPU = "device.attributes['gpu.nvidia.com']"
QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        (f"{GPU}.nvlinkDomain == 'a'", "no such key: nvlinkDomain"),
        # a domain the device lacks is an empty map, as in Kubernetes: its member is missing
        ("device.attributes['dra.example.com'].x == 1", "no such key: x"),
        (f"{GPU}.productName > 5", "no such overload"),
        ("quantity('lots') == quantity('1')", QUANTITY_FORMAT),
        ("1/0 == 1", "division by zero"),
        ("1 % 0 == 1", "modulus by zero"),
        ("9223372036854775807 + 1 > 0", "integer overflow"),
        (
            f"{GPU}.productName",
            "CEL result of type string could not be converted to bool: "
            "unsupported native conversion from string to 'bool'",
        ),
        (
            f"{GPU}.index",
            "CEL result of type int could not be converted to bool: "
            "unsupported type conversion from 'int' to bool",
        ),
        (
            "device.capacity['gpu.nvidia.com'].memory",
            "CEL result of type kubernetes.Quantity could not be converted to bool: "
            "type conversion error from 'Quantity' to 'bool'",
        ),
    ],
)
def test_a_selector_failing_on_a_device_raises_cel_go_s_error(expression: str, error: str) -> None:
    with pytest.raises(CelRuntimeError) as raised:
        compile_selector(expression).matches(a_device().cel())
    assert raised.value.error == error


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        ("has(device.attributes['dra.example.com'].x)", False),
        ("'dra.example.com' in device.attributes", False),
        (f"has({GPU}.nvlinkDomain) && {GPU}.nvlinkDomain == 'a'", False),
        ("device.capacity['dra.example.com'] == {}", True),
    ],
)
def test_has_and_a_missing_domain_select_without_error(expression: str, selected: bool) -> None:
    assert compile_selector(expression).matches(a_device().cel()) is selected


def nested(depth: int, inner: str = "device.driver == 'gpu.nvidia.com'") -> str:
    for i in range(depth):
        inner = f"(device.driver != 'x{i}' && {inner})"
    return inner


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 60 + "device.driver == 'gpu.nvidia.com'" + ")" * 60,
        "(" * 248 + "device.driver == 'gpu.nvidia.com'" + ")" * 248,
        nested(248),
    ],
    ids=["60-parentheses", "248-parentheses", "248-nested-ands"],
)
def test_selectors_as_deep_as_the_api_server_accepts_select(expression: str) -> None:
    limit = sys.getrecursionlimit()
    assert compile_selector(expression).matches(a_device().cel()) is True
    assert (
        compile_selector(expression.replace("gpu.nvidia.com", "x")).matches(a_device().cel())
        is False
    )
    assert sys.getrecursionlimit() == limit  # raised for the evaluation only


def one_node(*claims: dict[str, object], classes: tuple[dict[str, object], ...] = ()) -> Snapshot:
    topo = dgx1("d")
    dra = state([gpu_slice("d", topo)], (device_class(), *classes), claims)
    return Snapshot([gpu_node("d", topo, gpus=0)], dra=dra)


def test_a_claims_failing_selector_ends_the_attempt_with_kube_schedulers_message() -> None:
    snapshot = one_node(
        claim("typo", [exactly("gpus", 1, selectors=[f"{GPU}.productNam == 'x'"])]),
        claim("good", [exactly("gpus", 1)]),
    )
    fw = build_framework()
    result = schedule_one(claim_pod("p", "typo"), snapshot, fw)
    assert isinstance(result, Failure)
    assert result.message == (
        'running "DynamicResources" filter plugin: claim default/typo: selector #0: '
        "CEL runtime error: no such key: productNam (request gpus, device gpu-0 in pool d)"
    )
    assert result.pod_status is not None
    assert result.pod_status.code is Code.ERROR
    assert result.unresolvable  # nothing is preempted for it
    assert fw.waits_for(result) == "claim"  # tried again on a DRA change, not in a loop
    assert {s.code for s in result.statuses.values()} == {Code.ERROR}  # what explain shows
    # the next pod, whose claim is sound, is not harmed
    assert isinstance(schedule_one(claim_pod("q", "good"), snapshot, build_framework()), Decision)


def test_a_classes_failing_selector_names_the_class_the_request_and_the_claim() -> None:
    broken = device_class("broken", ["device.driver == 'gpu.nvidia.com'", "1/0 == 1"])
    snapshot = one_node(claim("c", [exactly("gpus", 2, cls="broken")]), classes=(broken,))
    result = schedule_one(claim_pod("p", "c"), snapshot, build_framework())
    assert isinstance(result, Failure)
    assert result.message == (
        'running "DynamicResources" filter plugin: class broken: selector #1: CEL runtime '
        "error: division by zero (request gpus of claim default/c, device gpu-0 in pool d)"
    )


def test_a_failing_selector_is_an_error_of_the_allocation_not_a_missing_device() -> None:
    dra = state(
        [gpu_slice("d", dgx1("d"))],
        claims=[claim("c", [exactly("gpus", 1, selectors=["'a' + 1 == 'a1'"])])],
    )
    claimed = dra.claim("default", "c")
    assert claimed is not None
    failure = allocate(dra, [claimed], "d", {}, FirstFit())
    assert isinstance(failure, AllocationFailure)
    assert failure.error
    assert "selector #0: CEL runtime error: no such overload (request gpus" in failure.message
