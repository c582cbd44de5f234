"""The stale-agent sweeper outlives a pass that fails: it used to be one task with no handler, so
one exception ended it without a word and no node ever went stale again."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web

from coordinator.api.keys import INVENTORY, SESSIONS
from coordinator.app.main import _stale_sweeper
from tests.support.polling import eventually


class _Inventory:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.passes = 0

    def sweep(self) -> list[str]:
        self.passes += 1
        if self.passes <= self.failures:
            raise RuntimeError(f"pass {self.passes} broke")
        return ["n1"] if self.passes == self.failures + 1 else []

    def expire_unknown(self) -> list[str]:
        return []

    def grace_left_s(self) -> float:
        return 0.0

    def end_grace(self) -> None:
        pass


async def test_a_failing_pass_is_logged_once_and_the_next_ones_still_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator")
    inventory = _Inventory(failures=3)
    app = web.Application()
    app[INVENTORY] = inventory  # type: ignore[assignment]
    app[SESSIONS] = object()  # type: ignore[assignment]
    context = _stale_sweeper(0.01)(app)
    await anext(context)
    try:
        await eventually(lambda: inventory.passes >= 6, what="six sweep passes", timeout_s=10)
    finally:
        await anext(context, None)
    messages = [r.getMessage() for r in caplog.records]
    failed = [r for r in caplog.records if "sweep failed" in r.getMessage()]
    assert len(failed) == 1
    assert failed[0].exc_info is not None  # the traceback, once
    assert "node n1 is stale: its agent is silent" in messages
    assert "the stale-agent sweep works again" in messages
