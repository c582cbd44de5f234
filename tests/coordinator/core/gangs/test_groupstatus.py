"""What a PodGroup's status says: the scheduler-plugins phase from member counts, and the
PodGroupScheduled condition, whose transition time moves only when its status does."""

from __future__ import annotations

import pytest

from coordinator.core.gangs.groupstatus import (
    MemberCounts,
    Scheduled,
    group_phase,
    scheduled_condition,
    with_condition,
)


@pytest.mark.parametrize(
    ("counts", "phase"),
    [
        (MemberCounts(pods=2), "Pending"),
        (MemberCounts(pods=3), "Scheduling"),
        (MemberCounts(pods=3, scheduled=2), "Scheduling"),
        (MemberCounts(pods=3, scheduled=3), "Scheduled"),
        (MemberCounts(pods=3, scheduled=3, running=2), "Scheduled"),
        (MemberCounts(pods=3, scheduled=3, running=3), "Running"),
        (MemberCounts(pods=3, scheduled=3, running=1, succeeded=2), "Running"),
        (MemberCounts(pods=3, scheduled=3, running=2, failed=1), "Failed"),
        (MemberCounts(pods=4, scheduled=4, running=3, failed=1), "Running"),
        (MemberCounts(pods=3, scheduled=3, succeeded=3), "Finished"),
    ],
)
def test_phase_of_a_group_of_min_3(counts: MemberCounts, phase: str) -> None:
    assert group_phase(3, counts) == phase


def test_the_condition_is_true_once_min_members_are_bound() -> None:
    assert scheduled_condition(3, 3, "ignored") == Scheduled(
        True, "Scheduled", "3 members bound (minimum 3)"
    )
    assert scheduled_condition(3, 1, "0/3 placed; no room") == Scheduled(
        False, "Unschedulable", "0/3 placed; no room"
    )
    assert scheduled_condition(3, 0, None) is None


def test_the_transition_time_moves_only_with_the_status() -> None:
    first = with_condition([], Scheduled(False, "Unschedulable", "a"), now="t1", generation=2)
    assert first == [
        {
            "type": "PodGroupScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "a",
            "lastTransitionTime": "t1",
            "observedGeneration": 2,
        }
    ]
    assert with_condition(first, Scheduled(False, "Unschedulable", "a"), now="t2") is None
    reworded = with_condition(first, Scheduled(False, "Unschedulable", "b"), now="t2")
    assert reworded is not None
    assert reworded[0]["lastTransitionTime"] == "t1"
    flipped = with_condition(first, Scheduled(True, "Scheduled", "ok"), now="t3")
    assert flipped is not None
    assert flipped[0]["lastTransitionTime"] == "t3"


def test_other_conditions_are_kept_in_place() -> None:
    theirs = {"type": "DisruptionTarget", "status": "False"}
    out = with_condition([theirs], Scheduled(True, "Scheduled", "ok"), now="t")
    assert out is not None
    assert [c["type"] for c in out] == ["DisruptionTarget", "PodGroupScheduled"]
