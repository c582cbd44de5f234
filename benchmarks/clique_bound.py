"""What no placement could beat: the fewest GPUs stranded in NVL72 racks by a given rack work.

The clique benchmark (:mod:`benchmarks.clique_placement`) counts, per tick, the free GPUs of the
racks some of whose GPUs are busy: 72 × the racks in use less the GPUs used in them. For the
work an arm holds in racks at one tick, the GPUs used are fixed; only the number of racks it
spreads over can change. This module re-packs that work perfectly — as if every tick every piece
of it could be moved anywhere at no cost — and returns the stranded GPUs of the fewest racks
that hold it:

- a gang member takes a whole tray (4 GPUs), lone GPU pods share trays (1–4 GPUs each: the
  fewest 4-GPU trays that hold them), a CPU-only pod takes no GPU and is left out;
- ``whole=False``: every tray may go to any rack — a lower bound for **any** placement of that
  rack work (no count of racks is fewer than the trays ÷ 18, rounded up);
- ``whole=True``: the rack piece of a gang of at most a rack's trays stays in one rack (the
  clique tier's rule), a larger gang's trays and the lone pods' trays go anywhere — the bound for
  placements that keep such gangs whole (an exact bin packing of the whole pieces).

It assumes an unbounded number of racks (a whole-gang packing may need more than the fleet has;
then no placement keeping the gangs whole holds that work), and says nothing about work an arm
could have put on the HGX nodes instead of the racks, nor about when work starts: the same rack
work as the arm's, tick by tick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

TRAY_GPUS = 4


@dataclass(frozen=True, slots=True)
class RackWork:
    """The work an arm holds in racks at one tick."""

    gangs: tuple[int, ...]  # trays in racks of each gang of at most a rack's trays
    large: int  # trays in racks of gangs larger than a rack
    lone: tuple[int, ...]  # GPUs of each lone GPU pod in a rack (1–4)

    @property
    def gpus(self) -> int:
        return TRAY_GPUS * (sum(self.gangs) + self.large) + sum(self.lone)


def lone_trays(gpus: Sequence[int]) -> int:
    """The fewest 4-GPU trays that hold pods of these GPU counts (each 1–4): a 4 or a 3 takes a
    tray (a 3's spare GPU takes a 1), 2s go in pairs (an odd 2 beside two 1s), the 1s left four
    to a tray."""
    if bad := [g for g in gpus if not 1 <= g <= TRAY_GPUS]:
        raise ValueError(f"lone pod GPUs: {bad[0]} is not 1–{TRAY_GPUS}")
    n1, n2, n3, n4 = (sum(1 for g in gpus if g == k) for k in (1, 2, 3, 4))
    ones = max(0, n1 - n3)
    trays = n4 + n3 + n2 // 2
    if n2 % 2:
        trays += 1
        ones = max(0, ones - 2)
    return trays + math.ceil(ones / TRAY_GPUS)


@cache
def fewest_bins(items: tuple[int, ...], capacity: int) -> int:
    """The fewest bins of ``capacity`` holding every item whole (exact: first-fit decreasing
    when it meets the volume bound, else a depth-first search over the bins' loads)."""
    if any(not 0 < i <= capacity for i in items):
        raise ValueError(f"items {items}: each must be 1–{capacity}")
    items = tuple(sorted(items, reverse=True))
    low = math.ceil(sum(items) / capacity)
    loads: list[int] = []
    for i in items:  # first-fit decreasing: an upper bound
        k = next((k for k, load in enumerate(loads) if load + i <= capacity), len(loads))
        if k == len(loads):
            loads.append(0)
        loads[k] += i
    best = len(loads)
    if best == low:
        return best
    seen: set[tuple[int, tuple[int, ...]]] = set()

    def search(k: int, loads: tuple[int, ...]) -> None:
        nonlocal best
        if len(loads) >= best or (k, loads) in seen:
            return
        seen.add((k, loads))
        if k == len(items):
            best = len(loads)
            return
        free = sum(capacity - load for load in loads)
        if len(loads) + math.ceil(max(0, sum(items[k:]) - free) / capacity) >= best:
            return
        for load in sorted(set(loads), reverse=True):  # bins of equal load are alike
            if load + items[k] <= capacity:
                j = loads.index(load)
                search(k + 1, tuple(sorted((*loads[:j], load + items[k], *loads[j + 1 :]))))
        search(k + 1, tuple(sorted((*loads, items[k]))))

    search(0, ())
    return best


def fewest_racks(work: RackWork, trays: int, *, whole: bool) -> int:
    """The fewest racks of ``trays`` trays that hold ``work`` (``whole``: each gang's piece in
    one rack)."""
    total = sum(work.gangs) + work.large + lone_trays(work.lone)
    spread = math.ceil(total / trays)
    return max(spread, fewest_bins(work.gangs, trays)) if whole else spread


def stranded_bound(work: RackWork, trays: int, *, whole: bool) -> int:
    """The free GPUs of the racks in use when ``work`` is packed into the fewest racks."""
    return trays * TRAY_GPUS * fewest_racks(work, trays, whole=whole) - work.gpus
