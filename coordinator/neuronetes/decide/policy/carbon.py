"""The guide's ``carbonAware`` block: region intensities, clean-energy hours, preferred regions,
and :func:`carbon_policy`, the per-pool policy (:mod:`..hooks`) that applies them.

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

``ctx.inputs["intensities"]`` is a callable returning the intensity source's last
:class:`Intensities` (``None``: no source configured); the controller's refresh task
(:mod:`coordinator.neuronetes.kube.carbon_source`) keeps it current and pushes the same values
into the scheduler's ``CarbonReadings`` (PoolPlacement refuses regions above
``maxCarbonIntensity``).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from coordinator.core.podspec.poolkeys import CLEAN_ENERGY_GATE
from coordinator.neuronetes.decide.conditions import Condition
from coordinator.neuronetes.decide.hooks import PolicyContext, enabled
from coordinator.neuronetes.decide.policy.errors import PolicyError

__all__ = [
    "CLEAN_ENERGY_GATE",
    "REGION_LABEL",
    "CleanHours",
    "GateVerdict",
    "Intensities",
    "carbon_policy",
    "check_regions",
    "parse_intensity",
]

UNIT: Final = "gCO2/kWh"
REGION_LABEL: Final = "topology.kubernetes.io/region"
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


def carbon_policy(ctx: PolicyContext) -> None:
    """Readings: ``CarbonIntensityAvailable`` says whether the source's last fetch worked (the
    last good values are kept, with their age). Time shifting: the pool's new pods are held by
    ``neuronetes.io/clean-energy-window`` outside ``cleanEnergyHours``, while every preferred
    region with a reading is above ``maxCarbonIntensity``, or before the source's first answer
    (a source that failed does not hold them: it cannot say); inside, the gate is lifted from held
    pods in place. ``status.policy.carbon`` says which and why; ``CleanEnergyWindow=False``
    while held."""
    block = ctx.block("carbonAware")
    if block is None:
        return
    source: Callable[[], Intensities | None] = ctx.inputs.get("intensities") or (lambda: None)
    readings = source()
    preferred = [str(r) for r in block.get("preferredRegions") or ()]
    most = block.get("maxCarbonIntensity")
    if most is not None and (isinstance(most, bool) or not isinstance(most, int | float)):
        raise PolicyError(f"carbonAware.maxCarbonIntensity: must be a number, not {most!r}")
    status: dict[str, Any] = {}
    values: Mapping[str, float] = {}
    if readings is None:
        status["intensity"] = "no carbon intensity source configured"
    else:
        values = readings.values
        status["intensity"] = readings.describe(ctx.inputs.get("clock", lambda: 0.0)())
        status["regions"] = {r: values[r] for r in preferred if r in values} or None
        if readings.error:
            ctx.conditions.append(
                Condition(
                    "CarbonIntensityAvailable",
                    "False",
                    "SourceFailed",
                    status["intensity"],
                )
            )
        elif readings.fetched_at is not None:
            ctx.conditions.append(
                Condition("CarbonIntensityAvailable", "True", "Read", status["intensity"])
            )
    known = {f.labels[REGION_LABEL] for f in ctx.node_facts.values() if REGION_LABEL in f.labels}
    problems = check_regions(preferred, known | set(values)) if known else []
    if problems:
        ctx.conditions.append(
            Condition("PreferredRegionsKnown", "False", "UnknownRegion", "; ".join(problems))
        )
    shifting = enabled(block.get("timeShifting"))
    if shifting is not None:
        hours = CleanHours.parse(str(shifting.get("cleanEnergyHours", "")))
        now = datetime.fromtimestamp(ctx.now, UTC)
        verdict = hours.gate(now)
        hold, reason = verdict.hold, verdict.reason
        measured = [r for r in preferred if r in values]
        first = readings is not None and readings.fetched_at is None and not readings.error
        if not hold and most is not None and first:
            hold = True
            reason = f"held by {CLEAN_ENERGY_GATE}: waiting for the first carbon intensity reading"
        if not hold and most is not None and measured and all(values[r] > most for r in measured):
            hold = True
            worst = ", ".join(f"{r} {values[r]:g}" for r in measured)
            reason = (
                f"held by {CLEAN_ENERGY_GATE}: every preferred region is above "
                f"maxCarbonIntensity {most:g} gCO2/kWh ({worst})"
            )
        ctx.set_gate(CLEAN_ENERGY_GATE, hold)
        status.update(held=hold, reason=reason)
        if verdict.opens_at is not None and verdict.hold:
            status["opensAt"] = verdict.opens_at.isoformat()
        if hold:
            ctx.conditions.append(Condition("CleanEnergyWindow", "False", "Held", reason))
        else:
            ctx.conditions.append(Condition("CleanEnergyWindow", "True", "Open", reason))
    ctx.status["carbon"] = status
