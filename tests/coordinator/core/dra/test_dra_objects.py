"""Reading ResourceSlices, DeviceClasses and ResourceClaims, and evaluating CEL selectors the way
Kubernetes does: which devices a node sees, which pools are usable, what a bad object says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coordinator.core.dra.allocator import selects
from coordinator.core.dra.cel import CelCompileError, compile_selector
from coordinator.core.dra.model import DeviceId
from coordinator.core.dra.objects import Device
from coordinator.core.dra.state import (
    DraObjectError,
    DraState,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from devcluster.subprocess_env import subprocess_env
from tests.coordinator.core.dra.dra_objects import (
    claim,
    exactly,
    gpu_slice,
    state,
)
from tests.support.dra import allocated_on
from tests.support.sched_hw import dgx1


def a_device() -> Device:
    s = gpu_slice("n", dgx1("n"))
    parsed = parse_resource_slice(s)
    assert isinstance(parsed, ResourceSlice)
    return parsed.devices[0]


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        ("device.driver == 'gpu.nvidia.com'", True),
        ("device.driver == 'other.example.com'", False),
        # unqualified attribute names belong to the driver's domain
        ("device.attributes['gpu.nvidia.com'].productName == 'Tesla-V100-SXM2-32GB'", True),
        ("device.attributes['gpu.nvidia.com'].uuid == 'GPU-n-0'", True),
        # domain-qualified names keep their own domain
        ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'", True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) >= 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", False),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('40Gi'))", True),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
            True,
        ),
        ("device.attributes['gpu.nvidia.com'].driverVersion.isLessThan(semver('535.1.0'))", False),
        ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.major() == 7", True),
        ("device.attributes['gpu.nvidia.com'].index < 1", True),
        # a missing attribute is an evaluation error, never "not selected": see
        # test_dra_selector_errors.py
    ],
)
def test_cel_selectors_see_the_device_as_kubernetes_shows_it(
    expression: str, selected: bool
) -> None:
    device = a_device()
    assert compile_selector(expression).matches(device.cel()) is selected


@pytest.mark.parametrize(
    ("expression", "simple"),
    [
        ("device.driver == 'gpu.nvidia.com'", True),
        ('device.driver=="gpu.nvidia.com"', True),
        ("  device.driver == 'other.example.com' ", True),
        (
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].index < 1",
            False,
        ),
        ("device.driver == 'gpu.nvidia' + '.com'", False),
        ("device.driver == 'gpu\\x2envidia.com'", False),  # an escape: read by CEL itself
    ],
)
def test_a_driver_comparison_answers_as_cel_does_without_building_the_device(
    expression: str, simple: bool
) -> None:
    """The commonest selector is answered from the device's id: the same answer as CEL's."""
    asked, built = a_device(), a_device()
    assert selects(asked, [expression]) is compile_selector(expression).matches(built.cel())
    assert (compile_selector(expression).driver_is is not None) is simple
    assert (not asked._cel) is simple  # its CEL value was not needed


def test_a_driver_only_class_allocates_without_loading_cel() -> None:
    """Upstream's scheduler_perf DeviceClass (``device.driver == "…"``, the commonest selector):
    a claim of it is checked and allocated without the CEL interpreter, whose loading (~0.5 s
    of CPU on a loaded machine) the first DRA pod after a start would otherwise pay."""
    probe = """
import sys
from tests.coordinator.core.dra.dra_objects import claim, device_class, exactly, gpu_slice, state
from tests.support.sched_hw import dgx1
from coordinator.core.dra.allocator import FirstFit, allocate, check_claim
dra = state(
    [gpu_slice("n", dgx1("n"))],
    [device_class("c", ['device.driver == "gpu.nvidia.com"'])],
    [claim("a", [exactly(cls="c")])],
)
asked = dra.claims[0]
assert check_claim(dra, asked) is None
done = allocate(dra, [asked], "n", {}, FirstFit())
print([str(r.device) for a in done for r in a.results], "celpy" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert out.stdout.split() == ["['gpu.nvidia.com/n/gpu-0']", "False"]


def test_malformed_cel_does_not_compile_and_says_where() -> None:
    with pytest.raises(CelCompileError):
        compile_selector("device.driver ==")
    with pytest.raises(CelCompileError):  # remembered, and still an error the second time
        compile_selector("device.driver ==")


def test_slice_attributes_are_typed_and_qualified() -> None:
    device = a_device()
    assert device.id == DeviceId("gpu.nvidia.com", "n", "gpu-0")
    assert device.attribute("uuid") == "GPU-n-0"
    assert device.attribute("gpu.nvidia.com/uuid") == "GPU-n-0"
    assert device.attribute("resource.kubernetes.io/pcieRoot") == "pci0000:00"
    assert device.attribute("index") == 0
    assert device.capacity["gpu.nvidia.com"]["memory"].value == 32768 * 2**20


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s["spec"].pop("driver"), "spec"),
        (lambda s: s["spec"]["devices"][0].pop("name"), "spec.devices[0].name"),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update(bad={"float": 1.5}),
            "spec.devices[0].attributes[bad]",
        ),
        (
            lambda s: s["spec"]["devices"][0]["capacity"].update(memory={"value": "lots"}),
            "spec.devices[0].capacity[memory].value",
        ),
    ],
)
def test_a_bad_slice_is_an_error_naming_the_field(mutate: object, field: str) -> None:
    s = gpu_slice("n", dgx1("n"))
    mutate(s)  # type: ignore[operator]
    got = parse_resource_slice(s)
    assert isinstance(got, DraObjectError)
    assert got.kind == "ResourceSlice"
    assert got.message.startswith(field)


def test_bad_class_and_claim_are_errors() -> None:
    bad_class = parse_device_class({"metadata": {"name": "c"}, "spec": {"selectors": [{}]}})
    assert isinstance(bad_class, DraObjectError)
    bad_claim = parse_resource_claim(
        claim("c", [{"name": "r", "exactly": {"deviceClassName": "x", "count": 0}}])
    )
    assert isinstance(bad_claim, DraObjectError)
    assert "count" in bad_claim.message


def test_claim_status_is_read() -> None:
    c = parse_resource_claim(
        claim(
            "c",
            [exactly("gpus", 2)],
            allocation=allocated_on("n", ["gpu-0", "gpu-1"]),
            reserved_for=["u1"],
        )
    )
    assert not isinstance(c, DraObjectError)
    assert c.allocation is not None
    assert [r.device.device for r in c.allocation.results] == ["gpu-0", "gpu-1"]
    assert c.allocation.reaches("n", {})
    assert not c.allocation.reaches("m", {})
    assert c.reserved_for == ("u1",)


def test_only_the_newest_complete_generation_of_a_pool_is_used() -> None:
    topo = dgx1("n")
    old = gpu_slice("n", topo, generation=1, name="old")
    new = gpu_slice("n", topo, generation=2, name="new")
    new["spec"]["devices"] = new["spec"]["devices"][:2]
    st = state([old, new])
    assert [d.id.device for d in st.devices_on("n", {})] == ["gpu-0", "gpu-1"]


def test_an_incomplete_pool_is_not_used() -> None:
    st = state([gpu_slice("n", dgx1("n"), slice_count=2)])
    assert st.devices_on("n", {}) == ()
    assert "incomplete" in st.problems["gpu.nvidia.com/n"]


def test_duplicate_device_names_make_the_pool_unusable_with_a_reason() -> None:
    a = gpu_slice("n", dgx1("n"), name="a", slice_count=2)
    b = gpu_slice("n", dgx1("n"), name="b", slice_count=2)
    b["spec"]["devices"] = b["spec"]["devices"][:1]  # gpu-0 again
    other = gpu_slice("m", dgx1("m"))
    st = state([a, b, other])
    assert st.devices_on("n", {}) == ()
    assert (
        st.problems["gpu.nvidia.com/n"] == "pool gpu.nvidia.com/n lists device gpu-0 more than once"
    )
    assert len(st.devices_on("m", {})) == 8  # other pools are unharmed


def test_slice_node_selection() -> None:
    topo = dgx1("x")
    by_selector = gpu_slice("x", topo, name="sel")
    del by_selector["spec"]["nodeName"]
    by_selector["spec"]["pool"]["name"] = "rack-a"
    by_selector["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}
        ]
    }
    everywhere = gpu_slice("x", topo, name="all")
    del everywhere["spec"]["nodeName"]
    everywhere["spec"]["pool"]["name"] = "shared"
    everywhere["spec"]["allNodes"] = True
    everywhere["spec"]["devices"] = everywhere["spec"]["devices"][:1]
    per_device = gpu_slice("x", topo, name="per")
    del per_device["spec"]["nodeName"]
    per_device["spec"]["pool"]["name"] = "per"
    per_device["spec"]["perDeviceNodeSelection"] = True
    per_device["spec"]["devices"] = per_device["spec"]["devices"][:2]
    per_device["spec"]["devices"][0]["nodeName"] = "n1"
    per_device["spec"]["devices"][1]["allNodes"] = True
    st = state([by_selector, everywhere, per_device])

    def pools(node: str, labels: dict[str, str]) -> list[str]:
        return sorted({f"{d.id.pool}/{d.id.device}" for d in st.devices_on(node, labels)})

    on_n1 = pools("n1", {"rack": "a"})
    assert "rack-a/gpu-7" in on_n1
    assert "shared/gpu-0" in on_n1
    assert {"per/gpu-0", "per/gpu-1"} <= set(on_n1)
    on_n2 = pools("n2", {"rack": "b"})
    assert on_n2 == ["per/gpu-1", "shared/gpu-0"]


def test_allocations_by_anyone_take_devices_and_overlays_add_ours() -> None:
    from coordinator.core.dra.model import ClaimAllocation, DeviceResult

    st = state(
        [gpu_slice("n", dgx1("n"))],
        claims=[
            claim("theirs", [exactly()], allocation=allocated_on("n", ["gpu-3"])),
            claim("ours", [exactly()]),
        ],
    )
    assert st.allocated == {DeviceId("gpu.nvidia.com", "n", "gpu-3")}
    ours = ClaimAllocation(
        "default",
        "ours",
        "uid-ours",
        "1",
        "n",
        (DeviceResult("gpus", DeviceId("gpu.nvidia.com", "n", "gpu-5")),),
    )
    more = st.with_allocations([ours])
    assert DeviceId("gpu.nvidia.com", "n", "gpu-5") in more.allocated
    assert more.claim("default", "ours").allocation is not None  # type: ignore[union-attr]
    assert st.claim("default", "ours").allocation is None  # type: ignore[union-attr]
    assert more.gpu_uuids_allocated("n", {}) == {"GPU-n-3", "GPU-n-5"}


def test_extended_resource_classes_explicit_and_implicit() -> None:
    from tests.coordinator.core.dra.dra_objects import device_class

    st = state(classes=[device_class(extended="nvidia.com/gpu"), device_class("other")])
    assert st.extended["nvidia.com/gpu"] == "gpu.nvidia.com"
    assert st.extended["deviceclass.resource.kubernetes.io/other"] == "other"
    assert isinstance(DraState().extended, dict)
