"""Typed per-cycle scratch state: computed once (PreFilter), read per node (Filter, Score).

A :class:`StateKey` carries the type of its value, so ``state.read(KEY)`` is typed without casts::

    SPREAD: Final = StateKey[SpreadState]("PodTopologySpread")
    state.write(SPREAD, SpreadState(...))
    spread = state.read(SPREAD)  # SpreadState
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["CycleState", "StateKey"]

T = TypeVar("T")


class StateKey(Generic[T]):
    """The name and (static) type of one entry of the cycle state."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


class CycleState:
    """Scratch space of one scheduling cycle of one pod."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[object, object] = {}

    def write(self, key: StateKey[T], value: T) -> None:
        self._data[key] = value

    def read(self, key: StateKey[T]) -> T:
        """The value written under ``key``; ``KeyError`` if no PreFilter wrote it (a bug)."""
        # No typing.cast: read per node by the filters, where a call more shows in the profile.
        return self._data[key]  # type: ignore[return-value]

    def get(self, key: StateKey[T]) -> T | None:
        return self._data.get(key)  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        return key in self._data
