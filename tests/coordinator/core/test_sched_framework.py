"""The framework itself: the kube-style summary, explanations kept in the result, extension
points other packages plug into (PreFilter node restriction), candidate-node restriction,
configuration from YAML, and a plugin bug turning into an error status instead of a crash."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import (
    ConfigError,
    SchedulerConfig,
    num_feasible_nodes_to_find,
)
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import PreFilterResult
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.plugins.packingmode import PackingArgs
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Code, Status, summarize
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, plain_node, request, run


def test_summary_counts_each_reason_and_sorts_like_kube() -> None:
    statuses = {f"n{i}": Status.unschedulable("Insufficient nvidia.com/gpu") for i in range(4)}
    statuses.update(
        {
            f"m{i}": Status.unschedulable("no single NUMA node has sufficient capacity")
            for i in range(8)
        }
    )
    assert summarize(12, statuses) == (
        "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, "
        "8 no single NUMA node has sufficient capacity."
    )
    # kube sorts the "<count> <reason>" strings as strings: "12 …" before "3 …".
    mixed = [Status.unschedulable("b")] * 12 + [Status.unschedulable("a", "c")] * 3
    assert summarize(15, mixed) == "0/15 nodes are available: 12 b, 3 a, 3 c."


def test_mixed_cluster_summary_from_a_real_cycle() -> None:
    nodes = [gpu_node(f"full{i}", dgx_h100(f"full{i}"), gpus=0) for i in range(4)]
    nodes += [plain_node(f"cpu{i}", labels={"pool": "cpu"}) for i in range(2)]
    result = run(pod("p", gpus=1), nodes)
    assert isinstance(result, Failure)
    assert result.message == "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."
    assert set(result.statuses) == {n.name for n in nodes}


def test_decision_keeps_per_node_verdicts_and_breakdowns_for_explain() -> None:
    nodes = [
        gpu_node("a", dgx_h100("a")),
        gpu_node("b", dgx_h100("b"), labels={"zone": "z"}),
        plain_node("cpu"),
    ]
    result = run(pod("p", gpus=2), nodes)
    assert isinstance(result, Decision)
    assert set(result.verdicts) == {"a", "b", "cpu"}
    assert result.verdicts["cpu"].status.reasons == ("Insufficient nvidia.com/gpu",)
    assert result.verdicts["cpu"].status.plugin == "NodeResourcesFit"
    chosen = result.verdicts[result.node]
    assert chosen.total == result.score == pytest.approx(sum(result.breakdown.values()))
    assert "GpuTopology" in result.breakdown
    assert result.feasible == 2
    assert result.evaluated == 3
    # Equal scores: the tie goes to the lexically first node, every time.
    assert result.node == "a"
    annotations = result.annotations()
    assert annotations["topos.io/placement-score"] == f"{result.score:.1f}"
    assert len(annotations["topos.io/assigned-gpus"].split(",")) == 2


def test_candidate_nodes_restrict_the_cycle() -> None:
    snapshot = Snapshot([gpu_node(n, dgx_h100(n)) for n in ("a", "b", "c")])
    result = schedule_one(pod("p", gpus=1), snapshot, build_framework(), candidate_nodes={"c"})
    assert isinstance(result, Decision)
    assert result.node == "c"
    assert result.verdicts["a"].status.reasons == ("node(s) were not among the candidate nodes",)


LEAF: StateKey[str] = StateKey("test.leaf")


class LeafOnly:
    """A domain-style plugin: restricts candidates with a PreFilterResult and records state."""

    name = "LeafOnly"

    def __init__(self, leaf: str) -> None:
        self.leaf = leaf

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> PreFilterResult:
        state.write(LEAF, self.leaf)
        names = frozenset(n.name for n in snapshot.nodes if n.labels.get("leaf") == self.leaf)
        return PreFilterResult(SUCCESS, names)


def test_registered_plugins_restrict_nodes_and_see_state() -> None:
    nodes = [
        gpu_node("l1-a", dgx_h100("l1-a"), labels={"leaf": "l1"}),
        gpu_node("l2-a", dgx_h100("l2-a"), labels={"leaf": "l2"}),
    ]
    fw = build_framework(
        SchedulerConfig(enabled_plugins=("LeafOnly",)),
        registry={"LeafOnly": lambda cfg: LeafOnly("l2")},
    )
    result = schedule_one(pod("p", gpus=1), Snapshot(nodes), fw)
    assert isinstance(result, Decision)
    assert result.node == "l2-a"
    assert result.state.read(LEAF) == "l2"


class Exploding:
    name = "Exploding"

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        raise RuntimeError("plugin bug")


def test_a_plugin_bug_becomes_an_error_status_not_a_crash() -> None:
    fw = build_framework(
        SchedulerConfig(enabled_plugins=("Exploding",)),
        registry={"Exploding": lambda c: Exploding()},
    )
    result = schedule_one(pod("p"), Snapshot([plain_node("n")]), fw)
    assert isinstance(result, Failure)
    assert result.pod_status is not None
    assert result.pod_status.code is Code.ERROR
    assert "plugin bug" in result.message


def test_unknown_plugin_name_is_refused_at_build() -> None:
    with pytest.raises(KeyError, match="Nope"):
        build_framework(SchedulerConfig(enabled_plugins=("Nope",)))


def test_config_from_yaml_changes_packing_and_weights() -> None:
    config = load_config(
        """
weights:
  bin_packing: 10
  topology_fitness: 0
packing: spread
percentage_of_nodes_to_score: 50
disabled_plugins: [GpuAvailability]
"""
    )
    assert config.weights["GpuPacking"] == 10
    assert config.args["GpuPacking"] == PackingArgs("spread")
    fw = build_framework(config)
    assert "GpuAvailability" not in {getattr(p, "name", "") for p in fw.plugins}
    assert all(p.name != "GpuTopology" for p, _ in fw.score)  # weight 0: not scored
    # Spread vs binpack decides between a half-used and an empty node.
    from tests.support.sched_hw import running

    half = gpu_node("half", dgx_h100("half"), pods=[running(pod("x", gpus=4), gpus=(0, 1, 2, 3))])
    empty = gpu_node("empty", dgx_h100("empty"))
    spread = run(pod("p", gpus=1), [half, empty], config=config)
    packed = run(pod("p", gpus=1), [half, empty])
    assert isinstance(spread, Decision)
    assert isinstance(packed, Decision)
    assert (spread.node, packed.node) == ("empty", "half")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("weights: {gpu_love: 3}", "weights.gpu_love: unknown weight"),
        ("weights: {numa_fit: -1}", "weights.numa_fit: must be an integer from 0 to 100"),
        ("packing: tight", "packing: unknown mode 'tight'"),
        ("colour: blue", "colour: unknown key"),
        ("percentage_of_nodes_to_score: 500", "percentage_of_nodes_to_score"),
        ("[1, 2", "not valid YAML"),
        ("- a list", "must be a mapping"),
    ],
)
def test_bad_config_is_rejected_with_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(text)


def test_empty_config_is_the_defaults() -> None:
    empty = load_config("")
    assert empty == load_config(None)
    assert dataclasses.replace(empty, other_profiles=()) == SchedulerConfig()


def test_kube_rule_for_how_many_feasible_nodes_suffice() -> None:
    assert num_feasible_nodes_to_find(50, 0) == 50
    assert num_feasible_nodes_to_find(1000, 0) == 420  # 50 - 1000/125 = 42 %
    assert num_feasible_nodes_to_find(5000, 0) == 500  # 50 - 5000/125 = 10 %
    assert num_feasible_nodes_to_find(1000, 100) == 1000


def test_adaptive_percentage_stops_filtering_early() -> None:
    nodes = [plain_node(f"n{i:03d}") for i in range(300)]
    config = SchedulerConfig(percentage_of_nodes_to_score=0)
    result = run(pod("p"), nodes, config=config)
    assert isinstance(result, Decision)
    assert result.feasible == num_feasible_nodes_to_find(300, 0) == 144


def _names(nodes: Sequence[NodeInfo]) -> list[str]:
    return [n.name for n in nodes]


def test_snapshot_rejects_duplicate_nodes_and_double_assume() -> None:
    with pytest.raises(ValueError, match="twice"):
        Snapshot([plain_node("a"), plain_node("a")])
    snapshot = Snapshot([plain_node("a"), plain_node("b")])
    obj = pod("p")
    result = schedule_one(obj, snapshot, build_framework())
    assert isinstance(result, Decision)
    snapshot.assume(request(obj), result.node, result.placement)
    with pytest.raises(ValueError, match="already assumed"):
        snapshot.assume(request(obj), result.node, result.placement)
    copy = snapshot.copy()
    assert copy.forget(request(obj).key)
    assert snapshot.is_assumed(request(obj).key)  # the copy's forget left the original alone
    assert _names(copy.nodes) == ["a", "b"]


def test_replace_keeps_the_indexes_current() -> None:
    """The inventory replaces rebuilt nodes; affinity, spread and taint scoring see the change."""
    from coordinator.core.podspec.tolerations import Taint
    from tests.support.sched_hw import running

    snapshot = Snapshot([plain_node("a"), plain_node("b")])
    cache_pod = pod(
        "p",
        spec={
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "cache"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        },
    )
    fw = build_framework()
    assert isinstance(schedule_one(cache_pod, snapshot, fw), Failure)  # builds the indexes
    snapshot.replace(plain_node("b", pods=[running(pod("c", labels={"app": "cache"}))]))
    placed = schedule_one(cache_pod, snapshot, fw)
    assert isinstance(placed, Decision)
    assert placed.node == "b"
    snapshot.replace(plain_node("b"))  # the cache pod ended
    assert isinstance(schedule_one(cache_pod, snapshot, fw), Failure)
    # A PreferNoSchedule taint appearing through replace is scored.
    snapshot.replace(plain_node("a", taints=[Taint("soft", "", "PreferNoSchedule")]))
    plain = schedule_one(pod("q"), snapshot, fw)
    assert isinstance(plain, Decision)
    assert plain.node == "b"
    snapshot.remove("b")
    assert schedule_one(pod("q"), snapshot, fw).node == "a"  # type: ignore[union-attr]


def test_forgetting_a_pod_lifts_its_anti_affinity() -> None:
    loner = pod(
        "loner",
        labels={"app": "x"},
        spec={
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "x"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        },
    )
    snapshot = Snapshot([plain_node("only")])
    fw = build_framework()
    first = schedule_one(loner, snapshot, fw)
    assert isinstance(first, Decision)
    snapshot.assume(request(loner), first.node, first.placement)
    other = pod("other", labels={"app": "x"})
    assert isinstance(schedule_one(other, snapshot, fw), Failure)
    assert snapshot.forget(request(loner).key)
    assert isinstance(schedule_one(other, snapshot, fw), Decision)


def test_rejections_carry_the_numbers_for_explanations() -> None:
    from tests.support.sched_hw import running

    other = pod("legacy", cpu="60", memory="200Gi", gpus=7)
    node = gpu_node("g", dgx_h100("g"), cpu=64, memory_gib=256, pods=[running(other)])
    result = run(pod("p", cpu="8", memory="64Gi", gpus=2), [node])
    assert isinstance(result, Failure)
    status = result.statuses["g"]
    assert status.detail == (
        "cpu: requested 8, free 4 of 64; memory: requested 64Gi, free 56Gi of 256Gi; "
        "nvidia.com/gpu: requested 2, free 1 of 8"
    )
    numa = pod("n", cpu="100", annotations={"topos.io/numa-policy": "single-numa"})
    failure = run(numa, [gpu_node("h", dgx_h100("h"))])
    assert isinstance(failure, Failure)
    assert failure.statuses["h"].detail.startswith("wants 100 CPUs, 1 GiB, 0 GPUs; NUMA 0: 56 CPUs")


@pytest.mark.parametrize("seed", range(4))
def test_memoised_cycles_decide_exactly_like_fresh_ones(seed: int) -> None:
    """The per-node memo and the shared plan memo never change a decision: every cycle on a warm
    snapshot equals the same cycle on freshly built NodeInfos with a new framework."""
    import random

    from tests.support.sched_hw import a100_mig, dgx1, pcie8

    rng = random.Random(seed)
    builders = [dgx1, pcie8, dgx_h100, a100_mig]
    nodes = []
    for i in range(8):
        topo = rng.choice(builders)(f"n{i}")
        labels = {"topology.kubernetes.io/zone": f"z{i % 3}"}
        nodes.append(gpu_node(f"n{i}", topo, labels=labels))
    snapshot = Snapshot(nodes)
    warm = build_framework()
    for k in range(30):
        obj = pod(
            f"p{k}",
            cpu=str(rng.choice([1, 4, 16])),
            gpus=rng.choice([0, 1, 2, 4]),
            labels={"app": rng.choice(["a", "b"])},
            annotations=rng.choice(
                [{}, {"topos.io/numa-policy": "single-numa"}, {"topos.io/gpu-locality": "nvlink"}]
            ),
        )
        if rng.random() < 0.3:
            obj["spec"]["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "a"}},
                }
            ]
        fresh_nodes = [
            NodeInfo.build(
                n.name,
                labels=n.labels,
                allocatable=n.allocatable,
                taints=n.taints,
                topology=n.topology,
                pods=n.pods,
            )
            for n in snapshot.nodes
        ]
        expected = schedule_one(obj, Snapshot(fresh_nodes), build_framework())
        got = schedule_one(obj, snapshot, warm)
        assert type(got) is type(expected)
        if isinstance(got, Decision):
            assert isinstance(expected, Decision)
            assert (got.node, got.placement, got.score) == (
                expected.node,
                expected.placement,
                expected.score,
            )
            snapshot.assume(request(obj), got.node, got.placement)
        else:
            assert isinstance(expected, Failure)
            assert got.message == expected.message
