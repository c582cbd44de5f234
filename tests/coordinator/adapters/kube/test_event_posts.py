"""Events are posted a few at a time (each one on the wire holds an HTTP/1.1 connection, and a new
connection is a TLS handshake): a burst of ``Scheduled`` Events all arrive, with their reason and
message, but never more than ``EVENTS_IN_FLIGHT`` at once."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from common.kube import KubeClient
from coordinator.adapters.kube.writer import EVENTS_IN_FLIGHT, KubeClusterWriter
from coordinator.engine.ports import REASON_SCHEDULED, PodRef


class SlowEvents:
    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        self.on_wire = 0
        self.most_on_wire = 0

    async def create_event(self, **event: Any) -> dict[str, Any]:
        self.on_wire += 1
        self.most_on_wire = max(self.most_on_wire, self.on_wire)
        await asyncio.sleep(0.01)
        self.on_wire -= 1
        self.posted.append(event)
        return {}


async def test_a_burst_of_events_goes_out_a_few_at_a_time() -> None:
    events = SlowEvents()
    writer = KubeClusterWriter(cast(KubeClient, object()), events=cast(KubeClient, events))
    pods = [PodRef("ml", f"p-{i}", f"uid-{i}") for i in range(40)]
    await asyncio.gather(*(writer.record_scheduled(p, f"placed {p.name}") for p in pods))
    assert len(events.posted) == 40
    assert events.most_on_wire == EVENTS_IN_FLIGHT
    assert {e["message"] for e in events.posted} == {f"placed p-{i}" for i in range(40)}
    assert {e["reason"] for e in events.posted} == {REASON_SCHEDULED}
    assert events.posted[0]["regarding"]["uid"].startswith("uid-")
