"""A scheduling cycle's result, asserted to be what the test expects (its message shown if not)."""

from __future__ import annotations

from coordinator.core.framework.results import Decision, Failure


def decided(result: object) -> Decision:
    assert isinstance(result, Decision), getattr(result, "message", result)
    return result


def refused(result: object) -> Failure:
    assert isinstance(result, Failure), result
    return result
