"""A ComputeDomain's ``spec.numNodes``: the first pod of a domain whose pods come one by one goes
to an NVLink clique with room for all of its nodes, not the tightest; 0 (unknown) keeps counting
the pods that exist; a bad value is refused naming the field and the value, and the domain is
placed as one of unknown size.

Two racks of four 4-GPU trays; two trays of rack 1 are busy, so best fit prefers rack 1.
The DRA objects go through the coordinator's :class:`~coordinator.inventory.dra.DraStore`, as
the watches deliver them.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.framework.results import Decision, Failure
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.inventory.dra import DraStore
from devcluster.pods import gang_members
from tests.coordinator.core.dra.dra_objects import device_class
from tests.coordinator.core.dra.test_dra_compute_domain import (
    CD,
    CHANNEL_CLASS,
    DRIVER,
    channel_claim,
    channel_slice,
    lone,
    place,
)
from tests.support.nvl72 import clique
from tests.support.sched_hw import gpu_node, request, ws4


def compute_domain(num_nodes: object, *, uid: str = CD) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "imex", "namespace": "default", "uid": uid},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": "imex-c"}}},
    }


def cluster(domain: dict[str, Any] | None, *claims: dict[str, Any]) -> tuple[Snapshot, DraStore]:
    store = DraStore()
    nodes = []
    for r in (1, 2):
        for t in range(1, 5):
            name = f"r{r}-t{t:02d}"
            labels = {"nvidia.com/gpu.clique": clique(r), "topos.io/leaf": "leaf-1"}
            nodes.append(gpu_node(name, ws4(name), labels=labels, gpus=4))
            store.apply("ResourceSlice", f"{name}-{DRIVER}", channel_slice(name))
    cls = device_class(CHANNEL_CLASS, (f"device.driver == '{DRIVER}'",))
    store.apply("DeviceClass", CHANNEL_CLASS, cls)
    for c in claims:
        store.apply("ResourceClaim", f"default/{c['metadata']['name']}", c)
    if domain is not None:
        store.apply("ComputeDomain", "default/imex", domain)
    snapshot = Snapshot(nodes, dra=store.state())
    for name in ("r1-t01", "r1-t02"):
        filler = gang_members(f"busy-{name}", 1, prefix=f"busy-{name}-", gpus=4)[0]
        filler["spec"]["nodeName"] = name
        snapshot.assume(request(filler), name, Placement(gpus=(0, 1, 2, 3)))
    return snapshot, store


def rack_of(result: Any) -> str:
    assert isinstance(result, Decision), result
    return str(result.node[:2])


def test_the_first_pod_goes_to_the_rack_with_room_for_num_nodes() -> None:
    snapshot, _ = cluster(compute_domain(4), channel_claim("job-0-channel", CD))
    (first,) = place([lone(0)], snapshot)
    assert rack_of(first) == "r2"


def test_unknown_num_nodes_counts_the_pods_that_exist() -> None:
    # numNodes 0 (NVIDIA's recommended value) or a domain not seen: the tighter rack, as before
    for domain in (compute_domain(0), None):
        snapshot, _ = cluster(domain, channel_claim("job-0-channel", CD))
        (first,) = place([lone(0)], snapshot)
        assert rack_of(first) == "r1"


def test_num_nodes_no_rack_holds_waits_naming_the_roomiest() -> None:
    snapshot, _ = cluster(compute_domain(5), channel_claim("job-0-channel", CD))
    (waits,) = place([lone(0)], snapshot)
    assert isinstance(waits, Failure), waits
    assert (
        f"no NVLink clique has room for 5 nodes (numNodes) and the 1 pods of ComputeDomain {CD} "
        f"not yet placed: the roomiest, {clique(2)}, holds 4 nodes with room for one of its "
        "pods, pods 4"
    ) in waits.message


def test_a_running_domain_joins_its_rack_whatever_num_nodes_says() -> None:
    running = channel_claim("old-0-channel", CD, on="r1-t03")
    snapshot, _ = cluster(compute_domain(4), channel_claim("job-0-channel", CD), running)
    (joined,) = place([lone(0)], snapshot)
    assert rack_of(joined) == "r1"


@pytest.mark.parametrize("bad", [-2, "four", 2.5, True])
def test_a_bad_num_nodes_is_refused_naming_it_and_the_pod_is_placed_as_before(
    bad: object,
) -> None:
    snapshot, store = cluster(compute_domain(bad), channel_claim("job-0-channel", CD))
    error = store.errors[("ComputeDomain", "default/imex")]
    assert str(error) == (
        f"ComputeDomain default/imex: spec.numNodes: {bad!r} is not a number of nodes (0 or more)"
    )
    assert store.rejected_now()["ComputeDomain"] == 1
    (first,) = place([lone(0)], snapshot)
    assert rack_of(first) == "r1"
    # mended: read again
    store.apply("ComputeDomain", "default/imex", compute_domain(4))
    assert store.rejected_now()["ComputeDomain"] == 0
    assert store.state().domain_nodes == {CD: 4}
