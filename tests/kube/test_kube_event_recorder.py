"""``EventRecorder``: one Event per object and reason whose count goes up, writes coalesced while
one is on its way, a spam filter per object, and an Event deleted meanwhile created again. The
API server is a fake that records what it is asked (the real one: tests/e2e_gangs)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from common.kube import NotFound
from common.kube.recorder import EventRecorder, SpamFilter
from common.kube.types import ObjectReference
from common.kube.verbs import GenericVerbs
from tests.support.clock import SleepingClock


class FakeEvents:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []
        self.hold: asyncio.Event | None = None
        self.deleted = False

    async def create(self, resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        assert kw["deferrable"] is not None  # Events never take a bind's turn
        self.calls.append(("create", body["count"], body["message"]))
        if self.hold is not None:
            await self.hold.wait()
        return {"metadata": {"name": body["metadata"]["name"]}}

    async def patch(self, resource: Any, name: str, patch: dict[str, Any], **kw: Any) -> None:
        assert kw["deferrable"] is not None
        if self.deleted:
            self.deleted = False
            raise NotFound("expired")
        self.calls.append(("patch", patch["count"], patch["message"]))


def recorder(fake: FakeEvents, spam: SpamFilter | None = None) -> EventRecorder:
    return EventRecorder(cast(GenericVerbs, fake), spam=spam)


POD: ObjectReference = {"apiVersion": "v1", "kind": "Pod", "name": "w-0", "namespace": "ns"}


async def test_the_same_reason_on_the_same_pod_updates_one_event() -> None:
    fake = FakeEvents()
    rec = recorder(fake)
    for k in range(3):
        await rec.record({**POD, "uid": "u1"}, reason="FailedScheduling", message=f"m{k}")
    await rec.record({**POD, "uid": "u1"}, reason="Scheduled", message="bound")
    await rec.record({**POD, "uid": "u2"}, reason="FailedScheduling", message="new pod")
    assert fake.calls == [
        ("create", 1, "m0"),
        ("patch", 2, "m1"),
        ("patch", 3, "m2"),
        ("create", 1, "bound"),  # another reason: its own Event
        ("create", 1, "new pod"),  # a pod re-created under the name: its own Event
    ]


async def test_occurrences_while_a_write_is_on_its_way_go_out_as_one_write() -> None:
    fake = FakeEvents()
    fake.hold = asyncio.Event()
    rec = recorder(fake)
    first = asyncio.create_task(rec.record(POD, reason="FailedScheduling", message="m0"))
    await asyncio.sleep(0)
    for k in range(1, 5):
        await rec.record(POD, reason="FailedScheduling", message=f"m{k}")  # returns at once
    fake.hold.set()
    await first
    assert fake.calls == [("create", 1, "m0"), ("patch", 5, "m4")]


async def test_the_spam_filter_holds_writes_back_and_the_next_write_carries_the_count() -> None:
    now = [0.0]
    fake = FakeEvents()
    rec = recorder(fake, SpamFilter(burst=2, per_s=1.0, clock=lambda: now[0]))
    for k in range(4):
        await rec.record(POD, reason="FailedScheduling", message=f"m{k}")
    assert fake.calls == [("create", 1, "m0"), ("patch", 2, "m1")]
    now[0] += 1.0  # one token back
    await rec.record(POD, reason="FailedScheduling", message="m4")
    assert fake.calls[-1] == ("patch", 5, "m4")


async def test_an_event_deleted_meanwhile_is_created_again_with_its_count() -> None:
    fake = FakeEvents()
    rec = recorder(fake)
    await rec.record(POD, reason="FailedScheduling", message="m0")
    fake.deleted = True
    await rec.record(POD, reason="FailedScheduling", message="m1")
    assert fake.calls == [("create", 1, "m0"), ("create", 2, "m1")]


def series_recorder(fake: FakeEvents, clock: SleepingClock) -> EventRecorder:
    return EventRecorder(
        cast(GenericVerbs, fake), series_flush_s=60.0, clock=clock, sleep=clock.sleep
    )


async def test_repeated_messages_are_written_when_the_series_starts_then_a_minute_later() -> None:
    fake, clock = FakeEvents(), SleepingClock()
    rec = series_recorder(fake, clock)
    for _ in range(10):
        await rec.record(POD, reason="FailedScheduling", message="0/3 nodes are available")
        await clock.advance(1.0)
    # created, then the series started (x2); the other eight only counted
    assert [(verb, count) for verb, count, _ in fake.calls] == [("create", 1), ("patch", 2)]
    await clock.advance(49.0)  # 58 s after the x2 write (at 1 s)
    assert len(fake.calls) == 2
    await clock.advance(2.0)  # a minute after it: the count so far
    assert fake.calls[-1] == ("patch", 10, "0/3 nodes are available")
    await clock.advance(120.0)  # nothing new: nothing written
    assert len(fake.calls) == 3


async def test_a_repeat_with_a_new_message_is_written_at_once() -> None:
    fake, clock = FakeEvents(), SleepingClock()
    rec = series_recorder(fake, clock)
    for message in ("m0", "m0", "m0", "m0", "m1"):
        await rec.record(POD, reason="FailedScheduling", message=message)
    assert fake.calls == [("create", 1, "m0"), ("patch", 2, "m0"), ("patch", 5, "m1")]
    await clock.advance(60.0)  # the held counts went out with the new message
    assert len(fake.calls) == 3
