"""Preemption frees the GPUs of DRA claims: a pod whose GPUs come from a ResourceClaim asks no
``nvidia.com/gpu``, so its eviction makes room only through the claims no remaining pod
reserves — whole devices or shares of consumable capacity; a KEP-5004 claim is the pod's own
``nvidia.com/gpu`` request and counts once. The snapshot, the preemptor's GPU
demand and the claims are built as the engine builds them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinator.core.domains.capacity import GPU, node_states
from coordinator.core.domains.packing import Member
from coordinator.core.gangs.cycle import members_of
from coordinator.core.preemption.capacity import capacity_room
from coordinator.core.preemption.claims import claim_holds
from coordinator.core.preemption.victims import PreemptionPlan, RunningPod, select_victims
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from devcluster.dra import DRIVER
from tests.coordinator.core.dra.dra_objects import claim, claim_pod, exactly, gpu_slice, state
from tests.coordinator.core.dra.test_dra_allocation import dra_node
from tests.support.dra import allocated_on
from tests.support.sched_hw import dgx1, pcie8, request

EVERY_GPU = [f"gpu-{i}" for i in range(8)]


def held(name: str, devices: Sequence[str], *users: str) -> dict[str, Any]:
    """Claim ``name`` allocated ``devices`` of node d, reserved for the pods ``users`` (uids)."""
    return claim(
        name,
        [exactly(count=len(devices))],
        allocation=allocated_on("d", devices),
        reserved_for=users,
    )


def shares(name: str, device: str, *users: str) -> dict[str, Any]:
    """Claim ``name`` holding a 40Gi share of ``device``, reserved for ``users``."""
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "d",
        "device": device,
        "shareID": f"00000000-0000-0000-0000-{int.from_bytes(name.encode()) % 10**12:012d}",
        "consumedCapacity": {"memory": "40Gi", "compute": "10"},
    }
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["d"]}]}
    allocation = {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": [term]}}
    return claim(
        name,
        [exactly("gpu", capacity={"memory": "40Gi"})],
        allocation=allocation,
        reserved_for=users,
    )


def preempt(
    claims: Sequence[Mapping[str, Any]],
    running: Sequence[RunningPod],
    *,
    want: Mapping[str, Any],
    shared: bool = False,
    with_claims: bool = True,
) -> PreemptionPlan | Status:
    """``ml/high`` (priority 1000) asking the claim ``want`` on the one DRA node d."""
    topo = pcie8("d", memory_mib=80 * 1024) if shared else dgx1("d")
    snapshot = Snapshot(
        [dra_node("d", topo)],
        dra=state([gpu_slice("d", topo, shared=shared)], claims=[*claims, want]),
    )
    high = request(claim_pod("high", want["metadata"]["name"], namespace="ml", priority=1000))
    by_uid = {f"uid-{p.key.partition('/')[2]}": p.key for p in running}
    holds = claim_holds(snapshot.dra, {n.name: n.labels for n in snapshot.nodes}, by_uid)
    return select_victims(
        members_of([high], snapshot),
        priority=1000,
        nodes=node_states(snapshot),
        running=running,
        claims=holds if with_claims else (),
        capacity=capacity_room(snapshot, [high]),
    )


def low(name: str, priority: int = 0) -> RunningPod:
    """A running claim pod: it requests no nvidia.com/gpu."""
    return RunningPod(key=f"ml/{name}", node="d", requests={"cpu": 1000}, priority=priority)


def test_evicting_a_claim_pod_frees_its_claims_devices() -> None:
    running = [low("low")]
    claims = [held("low-gpus", EVERY_GPU, "uid-low")]
    want = claim("want", [exactly(count=2)], namespace="ml")
    plan = preempt(claims, running, want=want)
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("ml/low",)
    assert plan.nominated == (("ml/high", "d"),)
    assert plan.claims == ("default/low-gpus",)
    # Without the claims, evicting the pod frees no GPU at all: preemption cannot help.
    refused = preempt(claims, running, want=want, with_claims=False)
    assert isinstance(refused, Status)
    assert "evicting every lower-priority pod would not make room" in refused.message


def test_one_victim_is_enough_and_only_its_claim_is_freed() -> None:
    running = [low("six"), low("two")]
    claims = [held("six", EVERY_GPU[:6], "uid-six"), held("two", EVERY_GPU[6:], "uid-two")]
    plan = preempt(claims, running, want=claim("want", [exactly(count=2)], namespace="ml"))
    assert isinstance(plan, PreemptionPlan), plan
    (victim,) = plan.victim_pods
    assert plan.claims == (victim.replace("ml/", "default/"),)
    # Three GPUs: the two-GPU claim alone is not enough, the six-GPU one is.
    plan = preempt(claims, running, want=claim("want", [exactly(count=3)], namespace="ml"))
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("ml/six",)
    assert plan.claims == ("default/six",)


def test_a_claim_shared_with_a_pod_that_stays_keeps_its_devices() -> None:
    want = claim("want", [exactly(count=2)], namespace="ml")
    # The claim is shared by a low and a high-priority pod: evicting the low one frees nothing.
    running = [low("low"), low("keeper", priority=5000)]
    claims = [held("team", EVERY_GPU, "uid-low", "uid-keeper")]
    refused = preempt(claims, running, want=want)
    assert isinstance(refused, Status)
    assert "would not make room" in (refused.detail or "")
    # A consumer that is not running (a pod being bound) keeps it as well.
    refused = preempt([held("team", EVERY_GPU, "uid-low", "uid-binding")], [low("low")], want=want)
    assert isinstance(refused, Status)
    # Shared by two low-priority pods: both go, and the claim is freed.
    running = [low("a"), low("b")]
    plan = preempt([held("team", EVERY_GPU, "uid-a", "uid-b")], running, want=want)
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victim_pods == ("ml/a", "ml/b")
    assert plan.claims == ("default/team",)


def _two_shares_on_every_gpu(
    protected: str | None = None,
) -> tuple[list[dict[str, Any]], list[RunningPod]]:
    """Every 80Gi GPU full with two 40Gi shares ``s<i>a``/``s<i>b``; ``protected`` at priority
    100, the others 0."""
    claims = []
    running = []
    for i in range(8):
        for half in ("a", "b"):
            name = f"s{i}{half}"
            claims.append(shares(name, f"gpu-{i}", f"uid-{name}"))
            running.append(low(name, priority=100 if name == protected else 0))
    return claims, running


def test_a_gpu_with_shares_is_freed_when_every_share_goes() -> None:
    claims, running = _two_shares_on_every_gpu(protected="s3b")
    want = claim("want", [exactly("gpu", capacity={"memory": "60Gi"})], namespace="ml")
    plan = preempt(claims, running, want=want, shared=True)
    assert isinstance(plan, PreemptionPlan), plan
    # Both shares of one GPU go (a GPU kept by one share is not free), and not the priority-100
    # share's GPU.
    assert len(plan.victim_pods) == 2
    (a, b) = plan.victim_pods
    assert a[:-1] == b[:-1] != "ml/s3"
    assert plan.claims == tuple(f"default/{p.removeprefix('ml/')}" for p in plan.victim_pods)


def test_a_gpu_pod_on_a_dra_node_preempts_and_kep_5004_gpus_count_once() -> None:
    # ml/plain asked nvidia.com/gpu: 4 and got a KEP-5004 claim; ml/claimed has a claim of 4.
    made = held("plain-extended-resources-x", EVERY_GPU[:4], "uid-plain")
    made["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    claims = [made, held("claimed", EVERY_GPU[4:], "uid-claimed")]
    running = [
        RunningPod(key="ml/plain", node="d", requests={GPU: 4}, priority=0),
        low("claimed"),
    ]
    topo = dgx1("d")
    snapshot = Snapshot([dra_node("d", topo)], dra=state([gpu_slice("d", topo)], claims=claims))
    holds = claim_holds(
        snapshot.dra,
        {"d": snapshot.nodes[0].labels},
        {"uid-plain": "ml/plain", "uid-claimed": "ml/claimed"},
    )

    def wanting(gpus: int) -> PreemptionPlan | Status:
        member = Member(name="ml/high", requests={GPU: gpus})  # an unchanged nvidia.com/gpu pod
        return select_victims(
            [member], priority=1000, nodes=node_states(snapshot), running=running, claims=holds
        )

    plan = wanting(8)
    assert isinstance(plan, PreemptionPlan), plan
    # The KEP-5004 pod's four GPUs are not counted twice (request and claim): both must go.
    assert plan.victim_pods == ("ml/claimed", "ml/plain")
    assert plan.claims == ("default/claimed", "default/plain-extended-resources-x")
    plan = wanting(4)
    assert isinstance(plan, PreemptionPlan), plan
    assert len(plan.victim_pods) == 1


def test_a_capacity_ask_is_a_share_and_evicts_only_what_makes_room() -> None:
    claims, running = _two_shares_on_every_gpu()
    want = claim("want", [exactly("gpu", capacity={"memory": "30Gi"})], namespace="ml")
    plan = preempt(claims, running, want=want, shared=True)
    assert isinstance(plan, PreemptionPlan), plan
    # 40Gi freed of one 80Gi GPU is room for 30Gi: one share goes, not a whole GPU's two.
    (victim,) = plan.victim_pods
    assert plan.claims == (f"default/{victim.removeprefix('ml/')}",)
    # Planned as part of a GPU, not as one.
    topo = pcie8("d", memory_mib=80 * 1024)
    snapshot = Snapshot(
        [dra_node("d", topo)], dra=state([gpu_slice("d", topo, shared=True)], claims=[want])
    )
    (member,) = members_of([request(claim_pod("high", "want", namespace="ml"))], snapshot)
    assert member.requests.get(GPU, 0) == 0
