"""``event_stamp`` formats now once a second and still says the current second."""

from __future__ import annotations

import datetime

import pytest

from common.kube import events


def test_the_stamp_follows_the_clock_second_by_second(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_796_000_000.2]
    monkeypatch.setattr(events.time, "time", lambda: now[0])
    first = events.event_stamp()
    assert first == "2026-11-30T00:53:20Z"
    now[0] += 0.7
    assert events.event_stamp() == first  # the same second
    now[0] += 0.2
    assert events.event_stamp() == "2026-11-30T00:53:21Z"
    now[0] -= 3600  # a clock set back is followed too
    assert events.event_stamp() == "2026-11-29T23:53:21Z"


def test_a_given_time_is_formatted_as_it_is() -> None:
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert events.event_stamp(when) == "2026-01-02T03:04:05Z"
