"""A cycle in which one node passes the filters chooses it without scoring, as kube-scheduler's
``schedulePod`` does (``len(feasibleNodes) == 1``): no PreScore or Score plugin runs, and the
explanation says the node was the only one that fit and was not scored."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import UNSCORED, schedule_one
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Status
from coordinator.engine.attempts import brief
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node


class Counting:
    """A scorer that counts its calls."""

    name = "Counting"

    def __init__(self) -> None:
        self.pre_scored = 0
        self.scored = 0

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        self.pre_scored += 1
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        self.scored += 1
        return 50.0


def _framework() -> tuple[Counting, Framework]:
    counting = Counting()
    fw = build_framework(
        SchedulerConfig(enabled_plugins=("Counting",)), registry={"Counting": lambda c: counting}
    )
    return counting, fw


def test_the_only_node_that_fits_is_chosen_unscored_and_the_explanation_says_so() -> None:
    counting, fw = _framework()
    nodes = [gpu_node("full", dgx_h100("full"), gpus=0), gpu_node("free", dgx_h100("free"))]
    result = schedule_one(pod("p", gpus=2), Snapshot(nodes), fw)
    assert isinstance(result, Decision)
    assert result.node == "free"
    assert (counting.pre_scored, counting.scored) == (0, 0)  # no PreScore, no Score
    assert (result.evaluated, result.feasible) == (2, 1)
    assert (result.score, dict(result.breakdown)) == (0.0, {})
    assert len(result.placement.gpus) == 2  # the filters' placement stands
    chosen = result.verdicts["free"]
    assert chosen.status is UNSCORED
    assert chosen.status.is_success
    assert chosen.status.detail == "the only node that passed the filters: not scored"
    assert result.verdicts["full"].status.reasons == ("Insufficient nvidia.com/gpu",)
    assert result.annotations()["topos.io/placement-score"] == "0.0"


def test_two_nodes_that_fit_are_scored() -> None:
    counting, fw = _framework()
    nodes = [gpu_node("a", dgx_h100("a")), gpu_node("b", dgx_h100("b"))]
    result = schedule_one(pod("p", gpus=2), Snapshot(nodes), fw)
    assert isinstance(result, Decision)
    assert (counting.pre_scored, counting.scored) == (1, 2)
    assert result.feasible == 2
    assert result.breakdown["Counting"] == 50.0
    assert result.verdicts[result.node].status is SUCCESS
    assert result.score == sum(result.breakdown.values())


def test_an_older_attempt_kept_in_brief_still_says_its_node_was_not_scored() -> None:
    _, fw = _framework()
    nodes = [gpu_node("full", dgx_h100("full"), gpus=0), gpu_node("free", dgx_h100("free"))]
    result = schedule_one(pod("p", gpus=2), Snapshot(nodes), fw)
    assert isinstance(result, Decision)
    kept = brief(result)  # what explain shows of a decision past the newest detailed ones
    assert kept.verdicts["free"].status is UNSCORED
