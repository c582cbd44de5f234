"""GPUs shared through DRA consumable capacity (KEP-5075): claims asking part of a shareable GPU
(``capacity.requests``) get shares of one device, each with its own ``shareID`` and what it
consumes; the rounding, defaults and refusals kube-scheduler applies; best fit among shared
GPUs without breaking an intact NVLink quad; shares and classic pods never meet on a GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import pytest

from common.quantity import parse_quantity
from coordinator.core.dra.capacity import Capacity, RequestPolicy, format_quantity, share
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.results import Failure
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.claimstatus import allocation_status
from devcluster.dra import DRIVER
from devcluster.pods import pod
from tests.coordinator.core.dra.dra_objects import claim, claim_pod, exactly, gpu_slice, state
from tests.coordinator.core.dra.test_dra_allocation import decided, dra_node, place, schedule
from tests.support.sched_hw import dgx1, gpu_node, pcie8

GI = 2**30
QUADS = ({0, 1, 2, 3}, {4, 5, 6, 7})


def shared_node(*claims: Mapping[str, Any], topo: Any = None, classic: bool = False) -> Snapshot:
    """One node of 8 shareable 80Gi GPUs (``topo``: other hardware); ``classic``: the device
    plugin also advertises its GPUs as ``nvidia.com/gpu``."""
    topo = topo if topo is not None else pcie8("n", memory_mib=80 * 1024)
    node = gpu_node("n", topo) if classic else dra_node("n", topo)
    return Snapshot([node], dra=state([gpu_slice("n", topo, shared=True)], claims=claims))


def asking(name: str, **capacity: str) -> dict[str, Any]:
    return claim(name, [exactly("gpu", capacity=capacity)])


def shares_on(node: str, *held: tuple[str, str]) -> dict[str, Any]:
    """An allocation of shares (device, memory consumed) as kube-scheduler writes it."""
    results = [
        {
            "request": "gpu",
            "driver": DRIVER,
            "pool": node,
            "device": device,
            "shareID": f"00000000-0000-0000-0000-{i:012d}",
            "consumedCapacity": {"memory": memory, "compute": "10"},
        }
        for i, (device, memory) in enumerate(held)
    ]
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"devices": {"results": results}, "nodeSelector": {"nodeSelectorTerms": [term]}}


def only(allocations: Sequence[ClaimAllocation]) -> tuple[str, dict[str, str], str]:
    """(device, consumed capacity, share id) of the one result of the one claim."""
    (alloc,) = allocations
    (result,) = alloc.results
    consumed = {n: format_quantity(q) for n, q in result.consumed}
    return result.device.device, consumed, result.share_id


# --- the capacity rules ------------------------------------------------------------------------


def test_requests_are_rounded_up_to_what_the_policy_accepts() -> None:
    stepped = {
        "m": Capacity(
            Fraction(80 * GI), RequestPolicy(Fraction(GI), Fraction(GI), None, Fraction(4 * GI))
        )
    }
    # 1Gi + n*4Gi: 6Gi becomes 9Gi; below the minimum becomes the minimum; nothing asked: default
    assert share(stepped, {"m": Fraction(6 * GI)}, {}) == {"m": 9 * GI}
    assert share(stepped, {"m": Fraction(GI, 2)}, {}) == {"m": GI}
    assert share(stepped, {}, {}) == {"m": GI}
    listed = {
        "m": Capacity(
            Fraction(40), RequestPolicy(Fraction(10), valid_values=(Fraction(10), Fraction(20)))
        )
    }
    assert share(listed, {"m": Fraction(15)}, {}) == {"m": 20}
    assert share(listed, {"m": Fraction(25)}, {}) == (
        "m 25 is above every valid value (10, 20)",
        True,
    )
    # no policy: what is asked, or the whole capacity when nothing is asked
    plain = {"m": Capacity(Fraction(80))}
    assert share(plain, {"m": Fraction(30)}, {}) == {"m": 30}
    assert share(plain, {}, {}) == {"m": 80}
    assert share(plain, {"m": Fraction(30)}, {"m": Fraction(60)}) == ("not 30 of m left", False)
    assert share(plain, {"x": Fraction(1)}, {}) == ("has no capacity x", True)


def test_a_range_maximum_is_enforced() -> None:
    capped = {
        "c": Capacity(
            Fraction(100), RequestPolicy(Fraction(10), Fraction(1), Fraction(50), Fraction(1))
        )
    }
    assert share(capped, {"c": Fraction(50)}, {}) == {"c": 50}
    assert share(capped, {"c": Fraction(51)}, {}) == ("c 51 is above the maximum 50", True)


# --- shares through a scheduling cycle ---------------------------------------------------------


def test_two_small_claims_share_one_gpu_and_a_larger_one_takes_another() -> None:
    snapshot = shared_node(
        asking("a", memory="20Gi"), asking("b", memory="20Gi"), asking("c", memory="50Gi")
    )
    results = place([claim_pod(p, p) for p in "abc"], snapshot)
    a, b, c = (only(decided(r).claims) for r in results)
    assert a[0] == b[0]  # one GPU, two shares
    assert a[1] == b[1] == {"memory": "20Gi", "compute": "10"}  # compute: the policy's default
    assert a[2]
    assert b[2]
    assert a[2] != b[2]  # a fresh share id each
    assert c[0] != a[0]  # 40Gi left there: the 50Gi claim goes to another GPU
    assert decided(results[0]).placement.gpus == decided(results[1]).placement.gpus


def test_best_fit_takes_the_shared_gpu_left_fullest() -> None:
    held = claim(
        "held", [exactly("gpu")], allocation=shares_on("n", ("gpu-2", "20Gi"), ("gpu-5", "60Gi"))
    )
    snapshot = shared_node(held, asking("small", memory="10Gi"), asking("mid", memory="30Gi"))
    assert only(decided(schedule(claim_pod("p", "small"), snapshot)).claims)[0] == "gpu-5"
    assert only(decided(schedule(claim_pod("q", "mid"), snapshot)).claims)[0] == "gpu-2"


def test_a_share_on_a_fresh_gpu_keeps_the_intact_nvlink_quad() -> None:
    topo = dgx1("n")  # 32Gi V100s; quads 0-3 and 4-7
    held = claim("held", [exactly("gpu")], allocation=shares_on("n", ("gpu-5", "30Gi")))
    snapshot = shared_node(held, asking("c", memory="8Gi"), topo=topo)
    device, _, _ = only(decided(schedule(claim_pod("p", "c"), snapshot)).claims)
    assert int(device.split("-")[1]) in QUADS[1] - {5}  # gpu-5 has 2Gi left; quad 0-3 stays whole


def test_a_claim_asking_no_capacity_takes_the_whole_gpu() -> None:
    snapshot = shared_node(claim("whole", [exactly("gpu", 8)]), asking("part", memory="1Gi"))
    whole = decided(place([claim_pod("w", "whole")], snapshot)[0])
    assert {n: format_quantity(q) for n, q in whole.claims[0].results[0].consumed} == {
        "memory": "80Gi",
        "compute": "10",
    }
    result = schedule(claim_pod("p", "part"), snapshot)
    assert isinstance(result, Failure)
    assert "no 1 device of class gpu.nvidia.com with enough capacity left" in result.message
    assert "asking memory 1Gi" in result.message


def test_impossible_capacity_requests_say_why() -> None:
    for ask, why in (
        ({"memory": "100Gi"}, "device gpu-0: memory 100Gi is more than it has (80Gi)"),
        ({"compute": "150"}, "device gpu-0: compute 150 is above the maximum 100"),
        ({"cores": "1"}, "device gpu-0: has no capacity cores"),
    ):
        result = schedule(claim_pod("p", "c"), shared_node(asking("c", **ask)))
        assert isinstance(result, Failure), ask
        head = "cannot allocate claim c: no 1 device of class gpu.nvidia.com that fits on this node"
        assert f"{head} ({why})" in result.message


def test_exclusive_gpus_also_refuse_a_request_above_their_capacity() -> None:
    topo = pcie8("n", memory_mib=80 * 1024)
    dra = state(
        [gpu_slice("n", topo)], claims=[asking("big", memory="81Gi"), asking("ok", memory="80Gi")]
    )
    snapshot = Snapshot([dra_node("n", topo)], dra=dra)
    assert isinstance(schedule(claim_pod("p", "big"), snapshot), Failure)
    ok = decided(schedule(claim_pod("q", "ok"), snapshot))
    assert not ok.claims[0].results[0].share_id  # taken whole: no share


def test_shares_and_classic_gpu_pods_never_meet_on_a_gpu() -> None:
    held = claim("held", [exactly("gpu")], allocation=shares_on("n", ("gpu-0", "10Gi")))
    snapshot = shared_node(held, asking("c", memory="10Gi"), classic=True)
    assert isinstance(schedule(pod("all", gpus=8), snapshot), Failure)  # gpu-0 is shared
    classic = decided(place([pod("seven", gpus=7)], snapshot)[0])
    assert 0 not in classic.placement.gpus
    # the share goes next to the other one, never onto a classic pod's GPU
    assert only(decided(schedule(claim_pod("p", "c"), snapshot)).claims)[0] == "gpu-0"


def test_the_claims_sharing_config_is_kept_in_the_allocation() -> None:
    gpu_config = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    }
    body = asking("ts", memory="10Gi")
    body["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": gpu_config}}
    ]
    d = decided(schedule(claim_pod("p", "ts"), shared_node(body)))
    assert d.claims[0].config == (
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": gpu_config},
        },
    )


def test_written_shares_read_back_as_the_same_consumption() -> None:
    snapshot = shared_node(asking("a", memory="20Gi"), asking("b", memory="20Gi"))
    decisions = [decided(r) for r in place([claim_pod("a", "a"), claim_pod("b", "b")], snapshot)]
    written = []
    for d in decisions:
        body = asking(d.claims[0].name, memory="20Gi")
        body["status"] = {"allocation": allocation_status(d.claims[0])}
        written.append(body)
    result = written[0]["status"]["allocation"]["devices"]["results"][0]
    assert result["consumedCapacity"] == {"compute": "10", "memory": "20Gi"}
    assert result["shareID"] == decisions[0].claims[0].results[0].share_id
    watched = state([gpu_slice("n", pcie8("n", memory_mib=80 * 1024), shared=True)], claims=written)
    device = decisions[0].claims[0].results[0].device
    assert watched.used(device) == {"memory": 40 * GI, "compute": 20}
    assert device not in watched.allocated  # shared, not held whole


@pytest.mark.parametrize("value", ["80Gi", "500m", "100", "1536Mi"])
def test_quantities_are_written_as_the_api_server_writes_them(value: str) -> None:
    assert format_quantity(parse_quantity(value)) == value


def test_a_first_available_subrequest_that_fits_is_taken() -> None:
    body = claim("alt", [])
    body["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {
                    "name": "large",
                    "deviceClassName": DRIVER,
                    "capacity": {"requests": {"memory": "90Gi"}},
                },
                {
                    "name": "small",
                    "deviceClassName": DRIVER,
                    "capacity": {"requests": {"memory": "30Gi"}},
                },
            ],
        }
    ]
    (alloc,) = decided(schedule(claim_pod("p", "alt"), shared_node(body))).claims
    (result,) = alloc.results
    assert result.request == "gpu/small"
    assert dict(result.consumed)["memory"] == 30 * GI
