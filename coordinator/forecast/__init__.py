"""When will a pending pod start? The production engine run forward on a simulated clock.

:mod:`.clock` (an event loop whose time jumps to the next timer), :mod:`.engine` (the scheduler
runtime and gang runtime over the in-memory cluster on that clock), :mod:`.runtimes` (how long
a running pod still runs, and who says so), :mod:`.predict` (a copy of a cluster run forward)
and :mod:`.live` (the copy of the live cluster, refreshed off the scheduling path, published
through :class:`coordinator.engine.forecasts.Forecasts`). The trace replay (``coordinator/sim``)
runs on the same clock and engine. See ``docs/simulate.md#predicted-start-times``.
"""
