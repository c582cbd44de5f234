"""Pods of one NVIDIA ComputeDomain (their IMEX channel claims name it) go to one NVLink clique:
a gang no clique holds waits instead of spanning racks, a gang of a domain already running joins
its clique, and members of two domains are refused naming both. Lone pods of one (no gang) are
kept in one clique too.

Two racks of 4-GPU trays (``nvidia.com/gpu.clique``), each tray publishing one channel device of
``compute-domain.nvidia.com`` as NVIDIA's DRA driver does.
"""

from __future__ import annotations

from typing import Any

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from devcluster.pods import gang_members, pod
from tests.coordinator.core.dra.dra_objects import claim, device_class, exactly, state
from tests.support.nvl72 import clique
from tests.support.sched_hw import gpu_node, request, ws4

DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CD, OTHER = "83479f70-e292-43d6-aa67-dd4ba8adab8f", "0b7e6f61-3c0a-4d7e-9a52-6f1f0c2d9e11"


def channel_slice(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "channel-0",
                    "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
                }
            ],
        },
    }


def channel_claim(name: str, domain: str, *, on: str | None = None) -> dict[str, Any]:
    """A channel claim as the ComputeDomain's ResourceClaimTemplate makes it (``on``: allocated
    there)."""
    config = {
        "requests": ["channel"],
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomainChannelConfig",
                "domainID": domain,
            },
        },
    }
    allocation = None
    if on is not None:
        allocation = {
            "devices": {
                "results": [
                    {"request": "channel", "driver": DRIVER, "pool": on, "device": "channel-0"}
                ],
                "config": [{**config, "source": "FromClaim"}],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [on]}]}
                ]
            },
        }
    body = claim(name, [exactly("channel", 1, cls=CHANNEL_CLASS)], allocation=allocation)
    body["spec"]["devices"]["config"] = [config]
    return body


def racks(trays: int, *, busy: dict[str, int] | None = None, claims: list[Any]) -> Snapshot:
    nodes, slices = [], []
    for r in (1, 2):
        for t in range(1, trays + 1):
            name = f"r{r}-t{t:02d}"
            labels = {"nvidia.com/gpu.clique": clique(r), "topos.io/leaf": "leaf-1"}
            nodes.append(gpu_node(name, ws4(name), labels=labels, gpus=4))
            slices.append(channel_slice(name))
    cls = device_class(CHANNEL_CLASS, (f"device.driver == '{DRIVER}'",))
    snapshot = Snapshot(nodes, dra=state(slices, (cls,), claims))
    for name, gpus in (busy or {}).items():
        filler = gang_members(f"busy-{name}", 1, prefix=f"busy-{name}-", gpus=gpus)[0]
        filler["spec"]["nodeName"] = name
        snapshot.assume(request(filler), name, Placement(gpus=tuple(range(gpus))))
    return snapshot


def gang(n: int, name: str = "train") -> list[Any]:
    objs = gang_members(name, n, prefix=f"{name}-", gpus=4, cpu="1", memory="1Gi")
    for i, obj in enumerate(objs):
        obj["spec"]["resourceClaims"] = [
            {"name": "channel", "resourceClaimName": f"{name}-{i}-channel"}
        ]
    return [request(o) for o in objs]


def member_claims(n: int, domain_of: Any, *, name: str = "train") -> list[Any]:
    return [channel_claim(f"{name}-{i}-channel", domain_of(i)) for i in range(n)]


def test_a_compute_domain_gang_no_clique_holds_waits_instead_of_spanning_racks() -> None:
    snapshot = racks(6, claims=member_claims(8, lambda i: CD))
    refused = schedule_gang(gang(8), snapshot, build_framework())
    assert isinstance(refused, Status), refused
    assert "no nvidia.com/gpu.clique domain holds the whole group (8 pods" in refused.message
    # the same pods without channel claims are split over the two racks
    plain = gang_members("plain", 8, prefix="plain-", gpus=4, cpu="1", memory="1Gi")
    split = schedule_gang([request(o) for o in plain], snapshot, build_framework())
    assert isinstance(split, GangDecision), split
    assert len({d.node[:2] for d in split.decisions}) == 2


def test_a_compute_domain_gang_takes_one_rack_and_says_so() -> None:
    snapshot = racks(6, claims=member_claims(5, lambda i: CD))
    decided = schedule_gang(gang(5), snapshot, build_framework())
    assert isinstance(decided, GangDecision), decided
    assert len({d.node[:2] for d in decided.decisions}) == 1
    assert f"ComputeDomain {CD}: its pods in one NVLink clique" in (
        decided.plan.placement.explanation
    )


def test_new_pods_of_a_running_compute_domain_join_its_rack() -> None:
    # rack 1 is the tighter fit for 3 trays (4 busy), but the domain's channels are on rack 2
    running = channel_claim("old-0-channel", CD, on="r2-t01")
    claims = [*member_claims(3, lambda i: CD), running]
    busy = {f"r1-t0{t}": 4 for t in (1, 2, 3)}
    snapshot = racks(6, busy=busy, claims=claims)
    decided = schedule_gang(gang(3), snapshot, build_framework())
    assert isinstance(decided, GangDecision), decided
    assert {d.node[:2] for d in decided.decisions} == {"r2"}
    assert f"ComputeDomain {CD}: its pods in its clique {clique(2)}" in (
        decided.plan.placement.explanation
    )
    # without the domain, the tight rack 1 is where best fit puts them
    plain = gang_members("plain", 3, prefix="plain-", gpus=4, cpu="1", memory="1Gi")
    fit = schedule_gang([request(o) for o in plain], snapshot, build_framework())
    assert isinstance(fit, GangDecision), fit
    assert {d.node[:2] for d in fit.decisions} == {"r1"}


def test_members_of_two_compute_domains_are_refused_naming_both() -> None:
    domain_of = lambda i: CD if i == 0 else OTHER  # noqa: E731
    snapshot = racks(4, claims=member_claims(2, domain_of))
    refused = schedule_gang(gang(2), snapshot, build_framework())
    assert isinstance(refused, Status)
    assert refused.message == (
        f"members claim channels of 2 ComputeDomains ({OTHER}, {CD}): a pod group runs in one"
    )


# Lone pods of a ComputeDomain (no gang keys): a Job whose pods come one after another.


def lone(k: int, name: str = "job") -> Any:
    obj = pod(f"{name}-{k}", gpus=4, cpu="1", memory="1Gi")
    obj["spec"]["resourceClaims"] = [
        {"name": "channel", "resourceClaimName": f"{name}-{k}-channel"}
    ]
    return request(obj)


def place(pods: list[Any], snapshot: Snapshot) -> list[Any]:
    """One at a time, each assumed with its channel allocation, as the scheduler loop does."""
    out = []
    fw = build_framework()
    for p in pods:
        result = schedule_one(p, snapshot, fw)
        if isinstance(result, Decision):
            snapshot.assume(p, result.node, result.placement, result.claims)
        out.append(result)
    return out


def test_lone_pods_of_a_compute_domain_go_one_after_another_to_one_rack() -> None:
    # rack 1 has one free tray: best fit would put the first pod there, and the second could not
    # follow it; the domain's two pods need a rack with room for both
    busy = {f"r1-t0{t}": 4 for t in (1, 2, 3)}
    snapshot = racks(4, busy=busy, claims=member_claims(2, lambda i: CD, name="job"))
    first, second = place([lone(0), lone(1)], snapshot)
    assert isinstance(first, Decision), first
    assert isinstance(second, Decision), second
    assert first.node[:2] == second.node[:2] == "r2"
    # the same pod without a channel claim takes the tight rack
    plain = schedule_one(request(pod("plain", gpus=4)), snapshot, build_framework())
    assert isinstance(plain, Decision)
    assert plain.node == "r1-t04"


def test_a_lone_pod_of_a_running_compute_domain_joins_its_rack() -> None:
    running = channel_claim("old-0-channel", CD, on="r2-t01")
    busy = {f"r1-t0{t}": 4 for t in (1, 2, 3)}
    snapshot = racks(4, busy=busy, claims=[*member_claims(1, lambda i: CD, name="job"), running])
    (decided,) = place([lone(0)], snapshot)
    assert isinstance(decided, Decision), decided
    assert decided.node[:2] == "r2"
    # rack 2 full: it waits, naming the rack, rather than going to rack 1
    full = racks(
        4,
        busy={f"r2-t0{t}": 4 for t in (1, 2, 3, 4)},
        claims=[*member_claims(1, lambda i: CD, name="job"), running],
    )
    (waits,) = place([lone(0)], full)
    assert isinstance(waits, Failure), waits
    assert f"ComputeDomain {CD} runs in NVLink clique {clique(2)}" in waits.message


def test_a_lone_pod_waits_when_no_rack_holds_its_domain_or_it_spans_two() -> None:
    snapshot = racks(2, claims=member_claims(3, lambda i: CD, name="job"))
    (waits,) = place([lone(0)], snapshot)
    assert isinstance(waits, Failure), waits
    assert (
        f"no NVLink clique has room for the 3 pods of ComputeDomain {CD} not yet placed: "
        f"the roomiest, {clique(1)}, holds 2"
    ) in waits.message
    spread = [
        channel_claim("a-channel", CD, on="r1-t01"),
        channel_claim("b-channel", CD, on="r2-t01"),
    ]
    snapshot = racks(2, claims=[*member_claims(1, lambda i: CD, name="job"), *spread])
    (refused,) = place([lone(0)], snapshot)
    assert isinstance(refused, Failure), refused
    assert (
        f"ComputeDomain {CD} already has channels in 2 NVLink cliques ({clique(1)}, {clique(2)})"
    ) in refused.message


def test_a_channel_allocated_by_node_labels_still_pins_its_domain_to_that_rack() -> None:
    # an allocation whose node selector is by label (not by node name) is read node by node
    running = channel_claim("old-0-channel", CD, on="r2-t01")
    running["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.clique", "operator": "In", "values": [clique(2)]}
                ]
            }
        ]
    }
    busy = {f"r1-t0{t}": 4 for t in (1, 2, 3)}
    snapshot = racks(4, busy=busy, claims=[*member_claims(1, lambda i: CD, name="job"), running])
    (decided,) = place([lone(0)], snapshot)
    assert isinstance(decided, Decision), decided
    assert decided.node[:2] == "r2"
