"""The clique benchmark's bound: rack work packed into the fewest NVL72 racks (18 trays of 4
GPUs), lone pods sharing trays, gangs of a rack or less kept whole when asked."""

from __future__ import annotations

import pytest

from benchmarks.clique_bound import RackWork, fewest_bins, lone_trays, stranded_bound


@pytest.mark.parametrize(
    ("gpus", "trays"),
    [
        ([3, 1], 1),  # a 1 in a 3's spare GPU
        ([2, 1, 1], 1),
        ([2, 2, 2], 2),
        ([1] * 5, 2),
        ([3, 3, 1, 1, 1], 3),
        ([4, 2, 1, 1, 1], 3),  # the odd 2 beside two 1s, the last 1 alone
        ([], 0),
    ],
)
def test_lone_pods_share_the_fewest_trays(gpus: list[int], trays: int) -> None:
    assert lone_trays(gpus) == trays


def test_a_lone_pod_of_more_than_a_tray_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="lone pod GPUs: 5 is not 1–4"):
        lone_trays([2, 5])


def test_whole_items_take_more_bins_than_their_volume_when_they_cannot_share() -> None:
    assert fewest_bins((10, 10, 10), 18) == 3


def test_the_fewest_bins_are_found_where_first_fit_decreasing_needs_one_more() -> None:
    # first-fit decreasing: 7+7 | 6+6+5 | 5; the best: 7+6+5 twice
    assert fewest_bins((5, 6, 7, 5, 6, 7), 18) == 2


def test_three_gangs_of_twelve_trays_strand_a_rack_only_when_kept_whole() -> None:
    work = RackWork(gangs=(12, 12, 12), large=0, lone=())
    assert stranded_bound(work, 18, whole=False) == 0  # 36 trays: two full racks
    assert stranded_bound(work, 18, whole=True) == 72  # three racks, 12 trays used in each


def test_lone_pods_and_a_large_gangs_trays_fill_the_holes_whole_gangs_leave() -> None:
    work = RackWork(gangs=(12, 16), large=6, lone=(4, 1, 1))
    # 12 + 6 large trays fill one rack; 16 + 2 trays of lone pods the other
    assert stranded_bound(work, 18, whole=True) == 2 * 72 - (4 * 34 + 6)


def test_a_partly_used_rack_strands_its_free_gpus() -> None:
    assert stranded_bound(RackWork(gangs=(2,), large=0, lone=(1,)), 18, whole=True) == 72 - 9
    assert stranded_bound(RackWork(gangs=(), large=0, lone=()), 18, whole=False) == 0
