"""The seeds' configuration objects change what the scheduler does: seed 003/004's scoring
weights pick a different node, their history factor steers away from a leaf that failed lately,
their topology constraints split a gang, and a KubeNexus profile turns plugins off."""

from __future__ import annotations

from typing import Any

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.plugins.domainscore import DomainHistory
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from devcluster.pods import gang_members, pod
from tests.support.clock import ManualClock
from tests.support.sched_hw import dgx_h100, gpu_node, request


def node(name: str, leaf: str, **kw: Any) -> NodeInfo:
    labels = {"topos.io/leaf": leaf, "topos.io/spine": "spine-1"}
    return gpu_node(name, dgx_h100(name), labels=labels, **kw)


def seed(**spec: Any) -> SchedulerConfig:
    """A topology-scheduler SchedulerConfig object (seeds 003/004) around ``spec``."""
    return load_config(
        {
            "apiVersion": "topology.scheduler/v1alpha1",
            "kind": "SchedulerConfig",
            "metadata": {"name": "topology-scheduler-config"},
            "spec": spec,
        }
    )


def placed(result: object) -> Decision:
    assert isinstance(result, Decision), result
    return result


def fill(snapshot: Snapshot, node_name: str, gpus: int, name: str) -> None:
    """Bind a ``gpus``-GPU pod onto ``node_name`` in the snapshot."""
    filler = pod(name, gpus=gpus)
    result = schedule_one(filler, snapshot, build_framework(), candidate_nodes=(node_name,))
    assert placed(result).node == node_name
    assert isinstance(result, Decision)
    snapshot.assume(request(filler), result.node, result.placement)


def two_leaves() -> Snapshot:
    """leaf-a: a1 full, a2 idle (62.5 % after a 2-GPU pod); leaf-b: b1 half used, b2 idle."""
    snapshot = Snapshot(
        [node("a1", "leaf-a"), node("a2", "leaf-a"), node("b1", "leaf-b"), node("b2", "leaf-b")]
    )
    fill(snapshot, "a1", 8, "busy-a1")
    fill(snapshot, "b1", 4, "half-b1")
    return snapshot


def test_seed_scoring_weights_decide_between_packing_and_domain_utilisation() -> None:
    # resourceAvailability (GPU packing) prefers the half-used b1; domainUtilization prefers
    # the busier leaf-a, where a2 sits. The weights the seed object gives decide.
    packing = seed(scoringWeights={"resourceAvailability": 1.0, "domainUtilization": 0})
    domain = seed(scoringWeights={"resourceAvailability": 0.1, "domainUtilization": 0.9})
    snap = two_leaves()
    one = placed(schedule_one(pod("p", gpus=2), snap.copy(), build_framework(packing)))
    other = placed(schedule_one(pod("p", gpus=2), snap.copy(), build_framework(domain)))
    assert one.node == "b1"
    assert other.node == "a2"
    assert other.breakdown["DomainUtilisation"] > one.breakdown.get("DomainUtilisation", 0)


def test_the_seed_003_weights_are_normalised_and_every_factor_has_a_scorer() -> None:
    config = seed(
        scoringWeights={
            "resourceAvailability": 0.4,
            "topologyAlignment": 0.3,
            "domainUtilization": 0.2,
            "historicalPerformance": 0.1,
        }
    )
    w = config.weights
    assert (w["GpuPacking"], w["GpuTopology"], w["DomainUtilisation"]) == (8, 6, 4)
    assert w["HistoricalPerformance"] == 2
    # Percentages and fractions of the same split are the same configuration.
    as_percent = seed(
        scoringWeights={
            "resourceAvailability": "40%",
            "topologyAlignment": "30%",
            "domainUtilization": "20%",
            "historicalPerformance": "10%",
        }
    )
    assert as_percent.weights == w
    names = [p.name for p, _ in build_framework(config).score]
    assert {"DomainUtilisation", "HistoricalPerformance"} <= set(names)


def test_recent_failures_in_a_leaf_lower_its_score_until_they_fade() -> None:
    clock = ManualClock()
    history = DomainHistory(half_life_s=60, clock=clock)
    config = seed(scoringWeights={"historicalPerformance": 1.0, "resourceAvailability": 0.01})
    framework = build_framework(config, history=history)
    snap = Snapshot([node("a1", "leaf-a"), node("b1", "leaf-b")])
    first = placed(schedule_one(pod("p", gpus=1), snap.copy(), framework))
    assert first.node == "a1"  # name order breaks the tie
    history.record(["a1"])  # a bind failed there
    steered = placed(schedule_one(pod("p", gpus=1), snap.copy(), framework))
    assert steered.node == "b1"
    clock.now += 60 * 8  # eight half-lives: the failure is forgotten
    again = placed(schedule_one(pod("p", gpus=1), snap.copy(), framework))
    assert again.node == "a1"
    assert history.weights() == {}


WORKERS = [
    request(obj)
    for obj in gang_members("train", 4, prefix="w", namespace="ml", gpus=8, cpu=None, memory=None)
]


def big_leaves() -> Snapshot:
    return Snapshot([node(f"{leaf}{i}", f"leaf-{leaf}") for leaf in "ab" for i in range(1, 5)])


def nodes_per_leaf(decided: GangDecision) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in {d.node for d in decided.decisions}:
        out[name[0]] = out.get(name[0], 0) + 1
    return out


def test_max_nodes_per_leaf_splits_a_gang_that_would_fill_one_leaf() -> None:
    free = schedule_gang(WORKERS, big_leaves(), build_framework(), min_member=4)
    assert isinstance(free, GangDecision)
    assert sorted(nodes_per_leaf(free).values()) == [4]  # a whole leaf, as the rules want
    capped = seed(topologyConstraints={"maxNodesPerLeaf": 2})
    split = schedule_gang(WORKERS, big_leaves(), build_framework(capped), min_member=4)
    assert isinstance(split, GangDecision)
    assert nodes_per_leaf(split) == {"a": 2, "b": 2}
    gpus = seed(topologyConstraints={"maxGPUsPerLeaf": 24})
    by_gpus = schedule_gang(WORKERS, big_leaves(), build_framework(gpus), min_member=4)
    assert isinstance(by_gpus, GangDecision)
    assert max(nodes_per_leaf(by_gpus).values()) <= 3


def test_a_gang_the_constraints_cannot_hold_is_refused_saying_so() -> None:
    snap = Snapshot([node(f"a{i}", "leaf-a") for i in range(1, 5)])
    tight = seed(topologyConstraints={"maxNodesPerLeaf": 2, "maxGPUsPerLeaf": 32})
    refused = schedule_gang(WORKERS, snap, build_framework(tight), min_member=4)
    assert isinstance(refused, Status)
    assert not refused.is_success
    assert "at most 2 nodes and 32 GPUs per leaf" in refused.message


def kube_profile(plugins: dict[str, Any], **extra: Any) -> SchedulerConfig:
    """A KubeSchedulerConfiguration (KubeNexus's shape) with one profile."""
    return load_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "kubenexus-scheduler", "plugins": plugins, **extra}],
        }
    )


def test_a_plugin_disabled_in_a_kube_profile_is_off() -> None:
    tainted = [node("t1", "leaf-a", taints=[Taint("dedicated", "infer", "NoSchedule")])]
    assert not isinstance(
        schedule_one(pod("p", gpus=1), Snapshot(tainted), build_framework()), Decision
    )
    off = kube_profile({"filter": {"disabled": [{"name": "TaintToleration"}]}})
    assert off.scheduler_name == "kubenexus-scheduler"
    result = placed(schedule_one(pod("p", gpus=1), Snapshot(tainted), build_framework(off)))
    assert result.node == "t1"


def test_a_kube_profile_scores_only_what_it_enables_with_its_weights() -> None:
    config = kube_profile(
        {
            "queueSort": {"enabled": [{"name": "Coscheduling"}]},
            "score": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "NUMATopology", "weight": 10}],
            },
        }
    )
    scored = {p.name: w for p, w in build_framework(config).score}
    assert scored == {"NumaTopology": 10}


def test_a_leafs_utilisation_follows_pods_assumed_forgotten_and_nodes_removed() -> None:
    # The snapshot keeps the slots per leaf current across cycles: each answer matches a
    # snapshot built afresh from the same nodes.
    framework = build_framework(seed(scoringWeights={"domainUtilization": 1.0}))
    snap = Snapshot([node(n, f"leaf-{n[0]}") for n in ("a1", "a2", "b1", "b2")])

    def decide(snapshot: Snapshot) -> Decision:
        return placed(schedule_one(pod("p", gpus=1), snapshot, framework))

    def fresh() -> Decision:
        return decide(Snapshot(list(snap.nodes)))

    assert decide(snap).node == "a1"  # idle leaves tie: name order
    fill(snap, "b1", 8, "busy-b1")
    busier = decide(snap)
    assert busier.node == "b2"  # leaf-b is busier now
    assert busier.breakdown == fresh().breakdown
    snap.forget("default/busy-b1")
    assert decide(snap).node == "a1"
    fill(snap, "b2", 4, "half-b2")
    snap.remove("b2")  # the busy node leaves: leaf-b is idle again, and smaller
    again = decide(snap)
    assert again.node == "b1"  # one GPU more is 1/8 of leaf-b, 1/16 of leaf-a
    assert again.breakdown == fresh().breakdown
