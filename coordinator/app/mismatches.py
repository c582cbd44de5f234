"""The GPU-mismatch reporter beside the scheduler (a ``cleanup_ctx`` after the scheduler's).

It writes through the scheduler's own writer (its Events client), only while that scheduler runs
and may bind (the leader), and counts each Event in ``topos_gpu_assignment_mismatches_total``
``{node, link}`` (``link``: ``worse``, ``same``, ``better`` or ``unknown-device``) and as a
topology violation (``topos_topology_violations_total{reason="gpu-assignment-mismatch"}``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from coordinator.api.keys import INVENTORY, METRICS
from coordinator.api.scheduling_metrics import MISMATCH
from coordinator.app.scheduler import RUNNING
from coordinator.engine.mismatches import MismatchReporter
from coordinator.inventory.mismatch import GpuMismatch

__all__ = ["install_mismatch_reporter"]


async def _reporter(app: web.Application) -> AsyncIterator[None]:
    runtime = app[RUNNING].runtime
    if runtime is None:  # the scheduler is off: nobody placed anything to compare with
        yield
        return
    counter = app[METRICS].gpu_mismatches

    scheduler = runtime.scheduler

    def count(node: str, mismatch: GpuMismatch) -> None:
        counter.labels(node, mismatch.link_change).inc()
        # also a topology violation (topos_topology_violations_total and the seeds' names)
        scheduler.observer.topology_violation(MISMATCH)

    reporter = MismatchReporter(
        app[INVENTORY],
        scheduler.writer,
        active=lambda: runtime.started.is_set() and scheduler.binder.may_bind(),
        on_reported=count,
    )
    task = asyncio.create_task(reporter.run(), name="gpu-mismatches")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def install_mismatch_reporter(app: web.Application) -> None:
    """Report GPU mismatches while the scheduler runs (install after ``install_scheduler``)."""
    app.cleanup_ctx.append(_reporter)
