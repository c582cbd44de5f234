"""A pod only goes back to the queue for a change that may help it: a failed retry doubles its
backoff, so waking it for nothing makes it miss the change that frees its room. Pods refused
only for want of DRA devices wait for devices to be freed, pods waiting for their claim to be
created go back (without a backoff) on the next DRA change, pods naming volume claims on a
change of claims, volumes or classes, other pods on any capacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Failure
from coordinator.core.podspec.intree import InlineVolume
from coordinator.core.queue import QueuedPod, QueueSettings, SchedulingQueue
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.changes import PendingChanges
from coordinator.inventory.state import BoundPod, NodeState, Taint
from devcluster.pods import gpu_pod
from tests.coordinator.core.dra.dra_objects import (
    claim,
    claim_pod,
    exactly,
    gpu_slice,
    state,
)
from tests.support.clock import ManualClock
from tests.support.dra import allocated_on
from tests.support.sched_hw import dgx1, gpu_node

TEMPLATE_POD = claim_pod("c", template="gpus-2")


FRAMEWORK = build_framework()


def failure(obj: dict[str, Any]) -> Failure:
    """The pod refused on one DGX-1 whose GPUs only DRA serves, all eight held by a claim."""
    topo = dgx1("d")
    claims = [
        claim(
            "held",
            [exactly("gpus", 8)],
            allocation=allocated_on("d", [f"gpu-{i}" for i in range(8)]),
        ),
        claim("two", [exactly("gpus", 2)]),
    ]
    snapshot = Snapshot(
        [gpu_node("d", topo, gpus=0)], dra=state([gpu_slice("d", topo)], claims=claims)
    )
    result = schedule_one(obj, snapshot, FRAMEWORK)
    assert isinstance(result, Failure), result
    return result


def test_failures_say_which_changes_may_help() -> None:
    short = failure(claim_pod("b", "two"))
    assert (FRAMEWORK.waits_for(short), short.gated) == ("dra", False)
    waiting = failure(TEMPLATE_POD)
    assert (FRAMEWORK.waits_for(waiting), waiting.gated) == ("claim", True)
    classic = failure(gpu_pod("a", 2))
    assert FRAMEWORK.waits_for(classic) == "any"


def parked(q: SchedulingQueue, obj: dict[str, Any], f: Failure) -> QueuedPod:
    q.add(obj)
    entry = q.pop()
    assert entry is not None
    q.failed(
        entry,
        message=f.message,
        gated=f.gated,
        waits_for=FRAMEWORK.waits_for(f),
        refused_by=FRAMEWORK.refused_by(f),
    )
    return entry


def names(q: SchedulingQueue) -> set[str]:
    out = set()
    while (entry := q.pop()) is not None:
        out.add(entry.key.split("/")[1])
    return out


def test_each_change_sends_back_only_the_pods_it_may_help() -> None:
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0), clock=clock)
    changes = PendingChanges(q, lambda: None)
    parked(q, gpu_pod("a", 2, uid="uid-a"), failure(gpu_pod("a", 2)))
    parked(q, claim_pod("b", "two"), failure(claim_pod("b", "two")))
    parked(q, TEMPLATE_POD, failure(TEMPLATE_POD))

    changes.dra(frees=False)  # e.g. the claim of another pod created: only "c" may fit now
    changes.apply()
    assert names(q) == {"c"}  # at once: waiting for its claim is no failed attempt

    changes.capacity()  # a classic pod ended: "a" may fit, "b" waits for devices
    changes.apply()
    clock.now += 1.0
    assert names(q) == {"a"}

    changes.dra(frees=True)  # a claim was released
    changes.apply()
    clock.now += 1.0
    assert names(q) == {"b"}


def test_a_volume_change_sends_back_only_the_pods_it_may_help() -> None:
    """A claim's change wakes the pods naming it, not every pod with claims (a benchmark that
    creates a claim per pod woke every waiting pod with claims at each); a PV's, the pods
    VolumeBinding refused; a CSINode's, those NodeVolumeLimits or VolumeBinding refused."""
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0), clock=clock)
    changes = PendingChanges(q, lambda: None)
    with_claim = gpu_pod("v", 2)
    with_claim["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]
    refused = schedule_one(with_claim, Snapshot([gpu_node("d", dgx1("d"))]), FRAMEWORK)
    assert isinstance(refused, Failure)
    assert 'persistentvolumeclaim "d" not found' in refused.message
    assert FRAMEWORK.refused_by(refused) == frozenset({"VolumeBinding"})
    v = parked(q, with_claim, refused)
    parked(q, gpu_pod("a", 2, uid="uid-a"), failure(gpu_pod("a", 2)))

    def refused_again() -> None:
        q.failed(v, message=refused.message, refused_by=FRAMEWORK.refused_by(refused))

    changes.volumes("PersistentVolumeClaim", "default/other")  # another pod's claim
    changes.volumes("PersistentVolumeClaim", "ml/d")  # its name, another namespace
    changes.apply()
    clock.now += 1.0
    assert names(q) == set()

    changes.volumes("PersistentVolumeClaim", "default/d")  # the claim was created
    changes.apply()
    clock.now += 1.0
    assert names(q) == {"v"}

    refused_again()
    changes.volumes("PersistentVolume", "pv-1")  # VolumeBinding refused it: a PV may bind
    changes.apply()
    clock.now += 4.0
    assert names(q) == {"v"}

    refused_again()
    changes.volumes("PersistentVolumeClaim", "")  # a fresh list of claims: any may be its
    changes.apply()
    clock.now += 8.0
    assert names(q) == {"v"}


def _terms(name: str, **spec: Any) -> dict[str, Any]:
    obj = gpu_pod(name, 2, uid=f"uid-{name}", namespace="ml")
    obj["spec"].update(spec)
    return obj


def _term(labels: dict[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}


WAITING = [
    _terms(
        "near-cache",
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [_term({"app": "cache"})]
            }
        },
    ),
    _terms(
        "away-from-cache",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [_term({"app": "cache"})]
            }
        },
    ),
    _terms(
        "spread-web",
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ],
    ),
    _terms("plain"),
]


def _woken(change: Any, nodes: Sequence[NodeState] = ()) -> set[str]:
    """The waiting pods above that ``change`` (called on a fresh PendingChanges) sends back;
    ``nodes``: the nodes the inventory holds."""
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0), clock=clock)
    by_name = {n.name: n for n in nodes}
    changes = PendingChanges(q, lambda: None, by_name.get)
    refused = failure(gpu_pod("a", 2))
    for obj in WAITING:
        parked(q, obj, refused)
    change(changes)
    changes.apply()
    clock.now += 1.0
    return names(q)


def test_a_bound_pod_sends_back_only_the_pods_it_may_let_in() -> None:
    """A pod bound somewhere can satisfy a required affinity term or a spread constraint that
    selects it; it can never lift an anti-affinity. Waking the others would only double their
    backoff (kube-scheduler's queueing hints draw the same line)."""
    assert _woken(lambda c: c.pod_came("ml", {"app": "cache"})) == {"near-cache"}
    assert _woken(lambda c: c.pod_came("ml", {"app": "web"})) == {"spread-web"}
    # the affinity term names no namespace: its pod's own; spread counts its own namespace
    assert _woken(lambda c: c.pod_came("other", {"app": "cache"})) == set()
    assert _woken(lambda c: c.pod_came("other", {"app": "web"})) == set()
    assert _woken(lambda c: c.pod_came("ml", {"app": "db"})) == set()
    # a pod that left (or was relabelled): every pod with affinity or spread terms
    assert _woken(lambda c: c.pods()) == {"near-cache", "away-from-cache", "spread-web"}


def test_many_arrivals_at_once_send_back_every_pod_with_terms() -> None:
    def flood(changes: PendingChanges) -> None:
        for i in range(100):
            changes.pod_came("ml", {"app": f"db-{i}"})

    assert _woken(flood) == {"near-cache", "away-from-cache", "spread-web"}


def _node(name: str, gpus: int, **state: Any) -> NodeState:
    free = {"cpu": 64_000, "memory": 2**40, "pods": 110, "nvidia.com/gpu": gpus}
    defaults: dict[str, Any] = {"stale": False, "connected": True, "schedulable": True}
    return NodeState(name=name, free=free, **{**defaults, "ready": True, **state})


def test_a_node_sends_back_only_the_pods_it_may_hold_and_those_with_terms() -> None:
    """A node added or changed can only take the pods its labels, taints and free resources
    admit (kube-scheduler's queueing hints on a Node's add or update); pods with affinity or
    spread terms go back whatever the node, since its labels move topology domains. "plain"
    asks 2 GPUs: a CPU node, a tainted or a cordoned GPU node wakes it no more."""
    terms = {"near-cache", "away-from-cache", "spread-web"}
    assert _woken(lambda c: c.nodes(["cpu-1"]), [_node("cpu-1", 0)]) == terms
    assert _woken(lambda c: c.nodes(["gpu-1"]), [_node("gpu-1", 8)]) == {*terms, "plain"}
    tainted = _node("gpu-1", 8, taints=(Taint(key="maintenance", effect="NoSchedule"),))
    assert _woken(lambda c: c.nodes(["gpu-1"]), [tainted]) == terms
    cordoned = _node("gpu-1", 8, unschedulable=True)
    assert _woken(lambda c: c.nodes(["gpu-1"]), [cordoned]) == terms
    not_ready = _node("gpu-1", 8, ready=False)
    assert _woken(lambda c: c.nodes(["gpu-1"]), [not_ready]) == terms
    # one of several changed nodes that fits is enough; a node gone since helps nobody
    both = [_node("cpu-1", 0), _node("gpu-1", 8)]
    assert _woken(lambda c: c.nodes(["cpu-1", "gpu-1"]), both) == {*terms, "plain"}
    assert _woken(lambda c: c.nodes(["gone"]), both) == terms


def _left(name: str, **fields: Any) -> BoundPod:
    return BoundPod(uid=f"uid-{name}", namespace="default", name=name, node="d", **fields)


def test_a_pod_leaving_wakes_only_the_pods_whose_refusers_it_may_help() -> None:
    """A pod only its node selector refuses waits for a node change, not for pods to leave; a
    pod whose refusers are not known (a gang member, a failure no framework cycle made) goes
    back whenever room was gained."""
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0), clock=clock)
    changes = PendingChanges(q, lambda: None)
    snapshot = Snapshot([gpu_node("d", dgx1("d"))])
    elsewhere = gpu_pod("elsewhere", 2, node_selector={"zone": "nowhere"})
    refused = schedule_one(elsewhere, snapshot, FRAMEWORK)
    assert isinstance(refused, Failure)
    assert FRAMEWORK.refused_by(refused) == frozenset()  # NodeAffinity: a node change lifts it
    q.add(elsewhere)
    entry = q.pop()
    assert entry is not None
    q.failed(entry, message=refused.message, refused_by=FRAMEWORK.refused_by(refused))
    q.add(gpu_pod("unknown", 2))
    entry = q.pop()
    assert entry is not None
    q.failed(entry, message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")

    changes.pod_left(_left("gpu-job", requests={"nvidia.com/gpu": 8}), gained=True)
    changes.apply()
    clock.now += 1.0
    assert names(q) == {"unknown"}


def test_a_pod_leaving_a_node_that_gained_nothing_frees_no_room() -> None:
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0), clock=clock)
    changes = PendingChanges(q, lambda: None)
    parked(q, gpu_pod("a", 2, uid="uid-a"), failure(gpu_pod("a", 2)))
    changes.pod_left(_left("gpu-job", requests={"nvidia.com/gpu": 8}), gained=False)
    changes.apply()
    clock.now += 1.0
    assert names(q) == set()  # its node is cordoned, say: the GPUs it freed are no one's
    changes.pod_left(_left("gpu-job-2", requests={"nvidia.com/gpu": 8}), gained=True)
    changes.apply()
    clock.now += 1.0
    assert names(q) == {"a"}


def test_a_pod_over_a_volume_limit_wakes_for_a_pod_with_an_inline_volume_leaving() -> None:
    clock = ManualClock()
    q = SchedulingQueue(QueueSettings(initial_backoff_s=1.0, max_backoff_s=8.0), clock=clock)
    changes = PendingChanges(q, lambda: None)
    q.add(gpu_pod("full", 2))
    entry = q.pop()
    assert entry is not None
    limits = frozenset({"NodeVolumeLimits"})
    q.failed(
        entry,
        message="0/1 nodes are available: 1 node(s) exceed max volume count.",
        refused_by=limits,
    )
    changes.pod_left(_left("no-volumes"), gained=True)
    changes.apply()
    clock.now += 1.0
    assert names(q) == set()
    ebs = InlineVolume(name="data", driver="ebs.csi.aws.com", handle="vol-1")
    changes.pod_left(_left("in-tree", inline_volumes=(ebs,)), gained=True)
    changes.apply()
    clock.now += 1.0
    assert names(q) == {"full"}
