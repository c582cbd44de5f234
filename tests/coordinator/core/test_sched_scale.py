"""Large clusters: how many nodes a cycle scores (kube's adaptive ``percentageOfNodesToScore`` by
default, ``100`` for every node, NeuroNetes' ``fastScheduling`` cap), and that what a user reads
stays true — the best of the scored nodes wins, a failing pod's message counts every node, an
explanation names every node that cannot take the pod, and the device index follows
assume/forget."""

from __future__ import annotations

import pytest

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import ConfigError, FastScheduling, SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, plain_node, request, running

EVERY_NODE = SchedulerConfig(percentage_of_nodes_to_score=100)


def _gpu_cluster(count: int, *, half_used: str | None = None) -> list[NodeInfo]:
    """``count`` idle DGX H100 nodes; ``half_used`` has 4 of its 8 GPUs taken (binpack's pick)."""
    nodes = []
    for i in range(count):
        name = f"n{i:04d}"
        pods = []
        if name == half_used:
            pods = [running(pod("busy", gpus=4), gpus=(0, 1, 2, 3))]
        nodes.append(gpu_node(name, dgx_h100(name), pods=pods))
    return nodes


def test_default_scores_kubes_adaptive_share_and_picks_the_best_scored_node() -> None:
    nodes = _gpu_cluster(300)
    result = schedule_one(pod("p", gpus=1), Snapshot(nodes), build_framework())
    assert isinstance(result, Decision)
    assert result.feasible == 144  # 50 % - 300/125 % = 48 % of 300
    scored = {n: v.total for n, v in result.verdicts.items() if v.status.is_success}
    assert len(scored) == 144
    assert result.score == max(scored.values())


def test_percentage_100_scores_every_node_and_finds_the_one_best_node() -> None:
    nodes = _gpu_cluster(400, half_used="n0399")
    fw = build_framework(EVERY_NODE)
    snapshot = Snapshot(nodes)
    for _ in range(3):  # wherever the last cycle stopped
        result = schedule_one(pod("p", gpus=1), snapshot, fw)
        assert isinstance(result, Decision)
        assert result.feasible == 400
        assert result.node == "n0399"


def test_consecutive_cycles_start_where_the_last_one_stopped() -> None:
    nodes = [plain_node(f"n{i:04d}") for i in range(1000)]
    fw = build_framework()
    snapshot = Snapshot(nodes)
    seen: set[str] = set()
    for k in range(2):
        result = schedule_one(pod(f"p{k}"), snapshot, fw)
        assert isinstance(result, Decision)
        scored = {n for n, v in result.verdicts.items() if v.status.is_success}
        assert len(scored) == 420  # 42 % of 1,000
        assert not scored & seen  # kube's rotating start: every node gets its turn
        seen |= scored


def test_cycles_in_a_dry_run_leave_the_next_cycle_where_it_would_have_started() -> None:
    """What-if and explain run cycles inside ``Framework.dry_run``: the scan they move is put
    back, so asking does not change which nodes the loop's next pod is scored on."""
    nodes = [plain_node(f"n{i:04d}") for i in range(1000)]
    fw = build_framework()
    snapshot = Snapshot(nodes)

    def scored(name: str) -> set[str]:
        result = schedule_one(pod(name), snapshot, fw)
        assert isinstance(result, Decision)
        return {n for n, v in result.verdicts.items() if v.status.is_success}

    first = scored("p0")
    start = fw.next_start
    with fw.dry_run():
        asked = scored("whatif")
        assert asked.isdisjoint(first)  # it did move the scan, inside
    assert fw.next_start == start
    assert scored("p1") == asked  # the loop's next pod scans what it would have


def test_fast_scheduling_scores_at_most_its_count() -> None:
    nodes = [plain_node(f"n{i:04d}") for i in range(1000)]
    config = load_config("fastScheduling: {enabled: true, maxNodesToScore: 50}")
    result = schedule_one(pod("p"), Snapshot(nodes), build_framework(config))
    assert isinstance(result, Decision)
    assert result.feasible == 50
    small = schedule_one(pod("p"), Snapshot(nodes[:20]), build_framework(config))
    assert isinstance(small, Decision)
    assert small.feasible == 20


def test_failing_pod_message_counts_every_node() -> None:
    # 8 GPUs fit nowhere: 590 nodes have 4 free, 10 are CPU-only.
    nodes = [
        gpu_node(
            f"g{i:04d}",
            dgx_h100(f"g{i:04d}"),
            pods=[running(pod(f"b{i}", gpus=4), gpus=(0, 1, 2, 3))],
        )
        for i in range(590)
    ]
    nodes += [plain_node(f"c{i}") for i in range(10)]
    result = schedule_one(pod("big", gpus=8), Snapshot(nodes), build_framework())
    assert isinstance(result, Failure)
    assert result.message == "0/600 nodes are available: 600 Insufficient nvidia.com/gpu."
    assert len(result.statuses) == 600


def test_explanation_names_every_node_that_cannot_take_the_pod() -> None:
    taint = Taint("dedicated", "infra", "NoSchedule")
    nodes = [plain_node(f"t{i:04d}", taints=(taint,)) for i in range(500)]
    nodes += [plain_node(f"n{i:04d}") for i in range(500)]
    result = schedule_one(pod("p"), Snapshot(nodes), build_framework())
    assert isinstance(result, Decision)
    assert result.feasible == 420  # stopped early…
    refused = [n for n, v in result.verdicts.items() if not v.status.is_success]
    assert len(refused) == 500  # …yet every tainted node is named, visited or not
    assert all(n.startswith("t") for n in refused)


def test_capacity_index_follows_assume_and_forget() -> None:
    nodes = _gpu_cluster(200)
    snapshot = Snapshot(nodes)
    fw = build_framework()
    big = request(pod("big", gpus=8))
    first = schedule_one(big, snapshot, fw)
    assert isinstance(first, Decision)
    snapshot.assume(big, first.node, first.placement)
    second = schedule_one(pod("again", gpus=8), snapshot, fw)
    assert isinstance(second, Decision)
    assert second.node != first.node
    for i, node in enumerate(snapshot.nodes):  # fill every other node with a 1-GPU pod
        if node.name != first.node:
            one = request(pod(f"one{i}", gpus=1))
            snapshot.assume(one, node.name, running(pod("x", gpus=1), gpus=(0,)).placement)
    full = schedule_one(pod("again", gpus=8), snapshot, fw)
    assert isinstance(full, Failure)
    assert full.message == "0/200 nodes are available: 200 Insufficient nvidia.com/gpu."
    snapshot.forget(big.key)
    back = schedule_one(pod("again", gpus=8), snapshot, fw)
    assert isinstance(back, Decision)
    assert back.node == first.node


def test_config_spellings_and_defaults() -> None:
    assert SchedulerConfig().percentage_of_nodes_to_score == 0  # kube's adaptive rule
    for spelling in ("percentageOfNodesToScore", "percentage_of_nodes_to_score"):
        config = load_config(f"{spelling}: 100")
        # the section's setting is every profile's (the AgentPool profile's too)
        assert {p.percentage_of_nodes_to_score for p in (config, *config.other_profiles)} == {100}
    fast = load_config("fastScheduling: {maxNodesToScore: 30}").fast_scheduling
    assert fast == FastScheduling(enabled=True, max_nodes_to_score=30)
    assert not load_config("fastScheduling: {enabled: false}").fast_scheduling.enabled


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("percentageOfNodesToScore: 101", "percentageOfNodesToScore: must be from 0 to 100"),
        ("percentageOfNodesToScore: half", "percentageOfNodesToScore: must be an integer"),
        (
            "{percentageOfNodesToScore: 50, percentage_of_nodes_to_score: 50}",
            "percentageOfNodesToScore: given twice",
        ),
        ("fastScheduling: {maxNodesToScore: 0}", "fastScheduling.maxNodesToScore: must be a"),
        ("fastScheduling: {maxNodesToScore: 2.5}", "fastScheduling.maxNodesToScore: must be a"),
        ("fastScheduling: {enabled: maybe}", "fastScheduling.enabled: must be true or false"),
        ("fastScheduling: {maxNodes: 5}", "fastScheduling.maxNodes: unknown key"),
        ("fastScheduling: 50", "fastScheduling: must be a mapping"),
    ],
)
def test_bad_scale_settings_are_rejected_with_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(text)


def _pools(cpu_nodes: int, gpu_nodes: int) -> list[NodeInfo]:
    nodes = [plain_node(f"c{i:04d}", labels={"pool": "cpu"}) for i in range(cpu_nodes)]
    return nodes + [plain_node(f"g{i:04d}", labels={"pool": "gpu"}) for i in range(gpu_nodes)]


def test_node_selector_pod_visits_its_pool_and_still_names_every_other_node() -> None:
    snapshot = Snapshot(_pools(500, 100))
    fw = build_framework()
    result = schedule_one(pod("p", node_selector={"pool": "gpu"}), snapshot, fw)
    assert isinstance(result, Decision)
    assert result.node.startswith("g")
    refused = {n: v.status.reasons for n, v in result.verdicts.items() if not v.status.is_success}
    assert len(refused) == 500
    assert set(refused.values()) == {("node(s) didn't match Pod's node affinity/selector",)}
    huge = pod("huge", cpu="1000", node_selector={"pool": "gpu"})
    failed = schedule_one(huge, snapshot, fw)
    assert isinstance(failed, Failure)
    assert failed.message == (
        "0/600 nodes are available: 100 Insufficient cpu, "
        "500 node(s) didn't match Pod's node affinity/selector."
    )


def test_relabelled_node_is_found_by_its_new_label() -> None:
    snapshot = Snapshot(_pools(300, 0))
    fw = build_framework()
    lonely = pod("p", node_selector={"pool": "gpu"})
    assert isinstance(schedule_one(lonely, snapshot, fw), Failure)
    snapshot.replace(plain_node("c0123", labels={"pool": "gpu"}))
    result = schedule_one(lonely, snapshot, fw)
    assert isinstance(result, Decision)
    assert result.node == "c0123"
