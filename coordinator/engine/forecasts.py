"""Predicted start times of pending pods, as the engine and the API read them (a port).

The live forecaster (:mod:`coordinator.forecast.live`, wired by the app) runs the engine forward
on a copy of the cluster off the scheduling path and publishes what it found here; the
scheduler's ``PodScheduled`` message, ``GET /v1/pending``, ``/ui`` and the what-if read it. A
:class:`Forecast` holds absolute times, so its sentence is worded when it is shown::

    expected to start in ~40 min (about 11:20 UTC), when train-7 ends

:class:`Forecasts` keeps two views of each pod: the newest forecast (the API shows it) and the
one last *stated* on the pod's condition, replaced only when the start moved by more than a
minute and a tenth of the wait, or what it waits for changed (:func:`moved`) — so an unchanged
prediction writes nothing, and a changed one at most once per
:data:`STATE_EVERY_S` (the scheduler keeps that bound). A pod's first forecast is written at
once, unless it is :attr:`Forecast.blind` (no start only because pods in the way declare no
end): that one waits for the pod's next explanation, or :data:`STATE_EVERY_S` after the last.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

__all__ = [
    "STATE_EVERY_S",
    "Forecast",
    "Forecasts",
    "StartPredictor",
    "describe",
    "moved",
    "span",
]

#: At most one condition write per pod for a changed forecast in this many seconds.
STATE_EVERY_S: Final = 60.0


def span(seconds: float) -> str:
    """``40 s``, ``40 min``, ``3.5 h``, ``2.0 d``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{_one_place(seconds / 3600)} h"
    return f"{_one_place(seconds / 86400)} d"


def _one_place(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def describe(
    starts_in_s: float | None,
    after: Sequence[str],
    *,
    unknown_ends: int = 0,
    horizon_s: float,
    at: float | None = None,
    unknown: str = "",
) -> str:
    """The sentence: ``expected to start in ~40 min, when train-7 ends``; ``at`` (Unix seconds of
    the start) adds ``(about 11:20 UTC)``; ``unknown``, why the start cannot be forecast:
    ``start unknown: waiting for resource claim infer-gpus to be created``."""
    if unknown:
        return f"start unknown: {unknown}"
    if starts_in_s is None:
        why = (
            f" ({unknown_ends} running pod{'s' * (unknown_ends != 1)} with no expected end)"
            if unknown_ends
            else ""
        )
        return f"no start expected within {span(horizon_s)}{why}"
    if starts_in_s < 1:
        return "expected to start now"
    names = [k.split("/", 1)[-1] for k in after]
    when = ""
    if names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        when = f", when {shown} end{'s' * (len(names) == 1)}"
    clock = ""
    if at is not None:
        moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
        clock = f" (about {moment:%H:%M} UTC)"
    return f"expected to start in ~{span(starts_in_s)}{clock}{when}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Forecast:
    """One pending pod's predicted start, made at ``made_at`` (Unix seconds)."""

    pod: str  # namespace/name
    uid: str = ""
    made_at: float
    starts_at: float | None  # Unix seconds; None: not within the horizon
    horizon_s: float
    node: str | None = None
    after: tuple[str, ...] = ()  # the running pods whose end it waits for
    sources: Mapping[str, str] = field(default_factory=dict)  # … and who said when they end
    unknown_ends: int = 0  # running pods with no expected end
    unknown: str = ""  # why the start cannot be forecast (then starts_at is None)

    @property
    def blind(self) -> bool:
        """No start found only because running pods in the way declare no end: it says so, but
        names nothing to wait for (in a cluster whose pods declare no ends, every forecast)."""
        return self.starts_at is None and not self.unknown and self.unknown_ends > 0

    def starts_in(self, now: float) -> float | None:
        return None if self.starts_at is None else max(0.0, self.starts_at - now)

    def sentence(self, now: float, *, clock: bool = False) -> str:
        return describe(
            self.starts_in(now),
            self.after,
            unknown_ends=self.unknown_ends,
            horizon_s=self.horizon_s,
            at=self.starts_at if clock else None,
            unknown=self.unknown,
        )


def moved(before: Forecast | None, after: Forecast, now: float) -> bool:
    """Is ``after`` a different statement than ``before``: a start appeared or went, what it
    waits for or why it is unknown changed, or the start moved by more than a minute and a tenth
    of the wait."""
    if before is None:
        return True
    if (before.starts_at is None) != (after.starts_at is None) or before.after != after.after:
        return True
    if before.unknown != after.unknown:
        return True
    if before.starts_at is None or after.starts_at is None:
        return False
    wait = max(0.0, after.starts_at - now)
    return abs(after.starts_at - before.starts_at) > max(60.0, 0.1 * wait)


class Forecasts:
    """The newest forecasts by pod key, and those last stated on each pod's condition."""

    def __init__(self, *, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall  # the forecasts' clock (Unix seconds): what "in ~40 min" counts from
        self._latest: dict[str, Forecast] = {}
        self._stated: dict[str, Forecast] = {}
        self.refreshed_at: float | None = None  # Unix seconds of the last refresh
        self.refreshes = 0
        self.last_run_s = 0.0  # wall seconds the last refresh's forward run took (off the loop)

    def get(self, pod: str) -> Forecast | None:
        return self._latest.get(pod)

    def stated(self, pod: str) -> Forecast | None:
        return self._stated.get(pod)

    def __len__(self) -> int:
        return len(self._latest)

    def publish(self, forecasts: Mapping[str, Forecast], now: float) -> list[str]:
        """Replace every forecast (pods not named have none now); the pods whose stated forecast
        changed (:func:`moved`), in the order given."""
        self._latest = dict(forecasts)
        self.refreshed_at = now
        self.refreshes += 1
        changed: list[str] = []
        for key in [k for k in self._stated if k not in forecasts]:
            del self._stated[key]
        for key, forecast in forecasts.items():
            if moved(self._stated.get(key), forecast, now):
                self._stated[key] = forecast
                changed.append(key)
        return changed


class StartPredictor(Protocol):
    """Runs the engine forward on a copy of the live cluster with ``pods`` added to the pending
    queue (in its order): their forecasts by ``namespace/name`` (the what-if)."""

    async def predict_with(self, pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Forecast]: ...
