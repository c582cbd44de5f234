"""The DeviceTaintRule writer beside the scheduler (a ``cleanup_ctx`` after the scheduler's):
unhealthy GPUs published as DRA device taints (``health.deviceTaints``; docs/health.md). It runs
only where the scheduler runs and the backend has an API server to write to; it writes only
while the scheduler leads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from coordinator.app.backend import Backend
from coordinator.app.config.sections import Config
from coordinator.app.scheduler import RUNNING

__all__ = ["install_health_taints"]


def _context(backend: Backend, effect: str) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        runtime = app[RUNNING].runtime
        writer = backend.health_taints(runtime, effect=effect) if runtime is not None else None
        if writer is None:
            yield
            return
        task = asyncio.create_task(writer.run(), name="health-taints")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return ctx


def install_health_taints(app: web.Application, config: Config, backend: Backend) -> None:
    """Publish unhealthy GPUs as DeviceTaintRules (install after ``install_scheduler``)."""
    section = config.health.device_taints
    if section.enabled:
        app.cleanup_ctx.append(_context(backend, section.effect))
