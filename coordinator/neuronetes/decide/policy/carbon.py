"""Carbon-aware pools: region intensities, clean-energy hours, preferred regions.

The intensity document (HTTP body or file; docs/neuronetes-policies.md#carbon-intensity)::

    {"unit": "gCO2/kWh", "regions": {"us-west-2": 85.5, "eu-north-1": 30}}

``unit`` is optional (when given it must be ``gCO2/kWh``); every value a number ≥ 0.
:func:`parse_intensity` raises :class:`~.errors.PolicyError` on anything else.
:class:`Intensities` keeps the last good reading, its time and the last error, so a failed fetch
leaves the scheduler on the previous values (with their age) and the status says why.

``timeShifting.cleanEnergyHours``: ``"HH:MM-HH:MM"`` in UTC, or followed by an IANA zone
(``"09:00-17:00 Europe/Stockholm"``). A window whose end is earlier than its start runs over
midnight (``"22:00-06:00"``); the end is exclusive; equal ends are refused.
:meth:`CleanHours.gate` says whether a non-urgent pod is held now by the scheduling gate
``neuronetes.io/clean-energy-window`` and when the window next opens.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from coordinator.core.podspec.poolkeys import CLEAN_ENERGY_GATE
from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = [
    "CLEAN_ENERGY_GATE",
    "CleanHours",
    "GateVerdict",
    "Intensities",
    "check_regions",
    "parse_intensity",
]

UNIT: Final = "gCO2/kWh"
_HOURS: Final = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*(?:\s(\S+))?\s*$")


def parse_intensity(text: str | bytes) -> dict[str, float]:
    """Region → gCO2/kWh from an intensity document (see the module docstring)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PolicyError(f"carbon intensity: not JSON ({exc})") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("regions"), Mapping):
        raise PolicyError('carbon intensity: expected {"regions": {"<region>": <gCO2/kWh>}}')
    unit = doc.get("unit", UNIT)
    if unit != UNIT:
        raise PolicyError(f"carbon intensity: unit {unit!r} is not {UNIT}")
    out: dict[str, float] = {}
    for region, value in doc["regions"].items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise PolicyError(
                f"carbon intensity: regions.{region}: must be a number of {UNIT} ≥ 0, not {value!r}"
            )
        out[str(region)] = float(value)
    return out


@dataclass(frozen=True, slots=True)
class Intensities:
    """The last good reading (``values`` at ``fetched_at``), and the last error since."""

    values: Mapping[str, float] = field(default_factory=dict)
    fetched_at: float | None = None  # on the caller's clock (seconds)
    error: str = ""  # "" after a good fetch

    def ok(self, values: Mapping[str, float], at: float) -> Intensities:
        return Intensities(dict(values), at, "")

    def failed(self, error: str, at: float) -> Intensities:
        """Keep the last good values; remember why this fetch gave none."""
        del at  # the age is the good reading's, not the failure's
        return replace(self, error=error)

    def age(self, now: float) -> float | None:
        return None if self.fetched_at is None else max(0.0, now - self.fetched_at)

    def describe(self, now: float) -> str:
        """One line for a status condition."""
        age = self.age(now)
        have = "no reading yet" if age is None else f"{len(self.values)} region(s), {age:.0f}s old"
        return f"{have}; last fetch failed: {self.error}" if self.error else have


def check_regions(preferred: Sequence[str], known: Collection[str]) -> list[str]:
    """The names in ``preferred`` no node or reading knows (empty: all known), each with a
    "did you mean" when one is close. Raise it as a condition; it never blocks placement."""
    problems = []
    for region in preferred:
        if region in known:
            continue
        close = difflib.get_close_matches(region, list(known), n=1)
        hint = f" — did you mean {close[0]!r}?" if close else ""
        problems.append(f"preferredRegions: unknown region {region!r}{hint}")
    return problems


@dataclass(frozen=True, slots=True)
class GateVerdict:
    hold: bool
    reason: str
    opens_at: datetime | None = None  # when a held pod's window next opens


@dataclass(frozen=True, slots=True)
class CleanHours:
    start: time
    end: time
    zone: tzinfo = UTC
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> CleanHours:
        match = _HOURS.match(text) if isinstance(text, str) else None
        if match is None:
            raise PolicyError(
                f"cleanEnergyHours: {text!r} is not HH:MM-HH:MM (optionally followed by a "
                "time zone, e.g. '09:00-17:00 Europe/Stockholm')"
            )
        h1, m1, h2, m2, zone_name = match.groups()
        try:
            start, end = time(int(h1), int(m1)), time(int(h2), int(m2))
        except ValueError:
            raise PolicyError(
                f"cleanEnergyHours: {text!r} has an hour or minute out of range"
            ) from None
        if start == end:
            raise PolicyError(f"cleanEnergyHours: {text!r} is an empty window")
        zone: tzinfo = UTC
        if zone_name:
            try:
                zone = ZoneInfo(zone_name)
            except (ZoneInfoNotFoundError, ValueError):
                raise PolicyError(f"cleanEnergyHours: unknown time zone {zone_name!r}") from None
        return cls(start, end, zone, text.strip())

    def contains(self, now: datetime) -> bool:
        local = _aware(now).astimezone(self.zone).time()
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end  # over midnight

    def next_open(self, now: datetime) -> datetime:
        local = _aware(now).astimezone(self.zone)
        opens = datetime.combine(local.date(), self.start, tzinfo=self.zone)
        if opens <= local:
            opens += timedelta(days=1)
        return opens

    def gate(self, now: datetime, *, urgent: bool = False) -> GateVerdict:
        """Whether a pod is held by ``neuronetes.io/clean-energy-window`` now."""
        if urgent:
            return GateVerdict(False, "urgent: not time-shifted")
        if self.contains(now):
            return GateVerdict(False, f"inside the clean-energy window {self.text}")
        opens = self.next_open(now)
        return GateVerdict(
            True,
            f"held by {CLEAN_ENERGY_GATE} until the clean-energy window {self.text} opens at "
            f"{opens.isoformat()}",
            opens,
        )


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise PolicyError("now: must be a timezone-aware datetime")
    return now
