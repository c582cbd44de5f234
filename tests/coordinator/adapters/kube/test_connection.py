"""The coordinator's one connection to the API server: its budgets share the connection but not
their rate limit (a bind never waits behind Events, as kube-scheduler's two clients), and it is
unusable outside its open..close span."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from common.kube import NODES, RateLimit
from coordinator.adapters.kube.connection import KubeConnection, NotConnected

pytestmark = pytest.mark.kube


async def test_budgets_share_the_connection_but_not_their_rate_limit(kubeconfig: Path) -> None:
    connection = KubeConnection(str(kubeconfig), rate_limit=RateLimit(qps=0.01, burst=1))
    with pytest.raises(NotConnected, match="not connected"):
        connection.budgets  # noqa: B018
    await connection.open()
    try:
        budgets = connection.budgets
        await budgets.events.list(NODES, limit=1)  # the events budget's one token
        queued = asyncio.create_task(budgets.events.list(NODES, limit=1))  # ~100 s away
        async with asyncio.timeout(10):  # the scheduler's budget is its own: at once
            await budgets.scheduler.list(NODES, limit=1)
        assert not queued.done()
        queued.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await queued
        await budgets.events.close()  # a budget closes nothing: the connection is the owner's
        await budgets.control.list(NODES, limit=1)
    finally:
        await connection.close()
    with pytest.raises(NotConnected):
        connection.budgets  # noqa: B018
