"""Python's cyclic garbage collector in the coordinator's steady state.

What the first lists built (5,000 Nodes: some 200,000 objects) lives as long as the process:
:func:`settle` moves it out of the collector's passes (``gc.freeze``) once the inventory has
synced, and raises the thresholds so that the scheduling loop's short-lived objects — most of them
freed by reference counting before any pass — are not walked every 700 allocations. In the
in-process engine benchmark at 5,000 nodes (``benchmarks/kwok_engine.py``) the raised thresholds
cost per bound pod what switching the collector off does (docs/benchmarks-history.md)."""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["STEADY_THRESHOLDS", "settle"]

#: (generation 0, 1, 2) thresholds after the first sync; Python's defaults are (700, 10, 10).
STEADY_THRESHOLDS: Final = (10_000, 50, 100)


def settle() -> None:
    """Freeze what exists now and raise the collection thresholds (call once, after the sync)."""
    gc.freeze()
    gc.set_threshold(*STEADY_THRESHOLDS)
