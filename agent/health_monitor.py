"""GPU and link health from NVML's counters: rates over a window, thresholds, a verdict.

Discovery reads raw counters each cycle (``agent.devices.nvml_health``); ``HealthMonitor``
remembers them across cycles and judges each GPU ``ok``, ``degraded`` or ``unhealthy`` with
readable reasons (docs/health.md):

- NVLink CRC / replay / recovery errors: the rise over the window against a threshold;
- an NVLink port down: only once it stayed down ``link_down_cycles`` cycles in a row (a blip is
  not a fault); a port that changed state ``link_flaps`` times in the window is *flapping*;
- a counter lower than the previous reading was reset (driver reload, GPU reset): its window
  starts again from the new value, and the reason says so;
- ECC: uncorrected errors since the driver loaded make the GPU unhealthy; corrected errors
  rising fast make it degraded;
- retired pages (many, or a retirement pending a reset), row remapping (pending: degraded;
  failed: unhealthy), hardware clock slowdowns, a PCIe link narrower than it can train,
  a fabric that is not registered or reports degraded bandwidth / an unhealthy route.

A reading NVML refused (``None``, NotSupported on older GPUs) is simply not judged. Of the
NVLink ports, only those with something to say are kept in the judged snapshot (see
``_notable``). The monitor
is pure (no I/O, no clock of its own): ``observe(topology, now)`` takes the time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

import msgspec

from common.model import Gpu, HealthStatus, NodeTopology, NvLinkHealth

_RANK: Final[dict[str, int]] = {"ok": 0, "degraded": 1, "unhealthy": 2}
_CLOCK_REASON_NAMES: Final = frozenset(
    {
        "gpu_idle",
        "applications_clocks",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clocks",
    }
)


class ThresholdError(ValueError):
    """A health threshold that cannot be used; names the key and the value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthThresholds:
    """When a reading becomes a fault (the agent's ``--health-thresholds`` file overrides)."""

    window_s: float = 600.0
    nvlink_crc_errors: int = 100  # rise within the window
    nvlink_replay_errors: int = 100
    nvlink_recovery_errors: int = 5
    link_down_cycles: int = 2  # consecutive cycles down before a port counts as down
    link_flaps: int = 3  # up/down changes within the window that make a port flapping
    ecc_corrected_errors: int = 1000  # rise within the window
    ecc_uncorrected_errors: int = 1  # since the driver loaded
    retired_pages: int = 60  # single- plus double-bit retired pages
    slowdown_reasons: tuple[str, ...] = ("hw_slowdown", "hw_thermal", "hw_power_brake")
    pcie_width_downtrained: bool = True  # narrower than the GPU's maximum width is degraded

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, origin: str = "health thresholds"
    ) -> HealthThresholds:
        """Thresholds from a mapping (a YAML file); unknown keys and bad values are errors
        naming the key and the value."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise ThresholdError(
                    f"{origin}: unknown key {key!r} (known: {', '.join(sorted(known))})"
                )
            default = getattr(cls(), key)
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ThresholdError(f"{origin}: {key} must be true or false, not {value!r}")
            elif isinstance(default, tuple):
                if not isinstance(value, list) or any(v not in _CLOCK_REASON_NAMES for v in value):
                    raise ThresholdError(
                        f"{origin}: {key} must be a list of "
                        f"{', '.join(sorted(_CLOCK_REASON_NAMES))}, not {value!r}"
                    )
                value = tuple(value)
            elif isinstance(default, float):
                if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                    raise ThresholdError(
                        f"{origin}: {key} must be a positive number, not {value!r}"
                    )
                value = float(value)
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ThresholdError(f"{origin}: {key} must be a whole number ≥ 1, not {value!r}")
            values[key] = value
        return cls(**values)


@dataclass(slots=True)
class _Series:
    """One counter's readings within the window; reset when the counter goes back."""

    samples: deque[tuple[float, int]] = field(default_factory=deque)
    reset_note: str | None = None

    def add(self, now: float, value: int, window_s: float, what: str) -> int | None:
        """Record ``value``; its rise over the window (``None`` until two readings exist)."""
        if self.samples and value < self.samples[-1][1]:
            self.reset_note = (
                f"{what} went back from {self.samples[-1][1]} to {value} (counter reset);"
                " its window starts again"
            )
            self.samples.clear()
        self.samples.append((now, value))
        # keep the newest reading at or before the window's start as the baseline
        while len(self.samples) > 1 and self.samples[1][0] <= now - window_s:
            self.samples.popleft()
        if len(self.samples) < 2:
            return None
        return value - self.samples[0][1]


@dataclass(slots=True)
class _Port:
    down_streak: int = 0
    last_up: bool | None = None
    changes: deque[float] = field(default_factory=deque)
    # the last reading and its verdict, reused while nothing moves (most links, most cycles)
    seen: NvLinkHealth | None = None
    judged: NvLinkHealth | None = None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min"


class HealthMonitor:
    """Remembers readings per GPU (by UUID) and port, and judges them (see the module doc)."""

    def __init__(self, thresholds: HealthThresholds | None = None) -> None:
        self.thresholds = thresholds or HealthThresholds()
        self._series: dict[tuple[str, str], _Series] = {}
        self._ports: dict[tuple[str, int], _Port] = {}
        self.xids: dict[str, list[int]] = {}

    def record_xid(self, uuid: str, xid: int) -> None:
        seen = self.xids.setdefault(uuid, [])
        if xid not in seen:
            seen.append(xid)

    def observe(self, topology: NodeTopology, now: float) -> NodeTopology:
        """The snapshot with every GPU's health judged (readings remembered for next time)."""
        gpus = tuple(self._gpu(gpu, now) for gpu in topology.gpus)
        return msgspec.structs.replace(topology, gpus=gpus)

    def _rise(self, uuid: str, key: str, value: int | None, now: float, what: str) -> int | None:
        if value is None:
            return None
        series = self._series.setdefault((uuid, key), _Series())
        return series.add(now, value, self.thresholds.window_s, what)

    def _note(self, uuid: str, key: str) -> str | None:
        series = self._series.get((uuid, key))
        return None if series is None else series.reset_note

    def _gpu(self, gpu: Gpu, now: float) -> Gpu:
        health = gpu.health
        if health is None:
            return gpu
        t = self.thresholds
        window = _minutes(t.window_s)
        reasons: list[tuple[HealthStatus, str]] = []
        uuid = gpu.uuid

        links = tuple(self._link(uuid, link, now) for link in health.nvlinks)
        for link in links:
            if link.status != "ok" and link.reason:
                reasons.append((link.status, link.reason))

        if (
            health.ecc_uncorrected is not None
            and health.ecc_uncorrected >= t.ecc_uncorrected_errors
        ):
            reasons.append(
                (
                    "unhealthy",
                    f"{health.ecc_uncorrected} uncorrected ECC errors since the driver loaded",
                )
            )
        corrected = self._rise(
            uuid, "ecc_corrected", health.ecc_corrected, now, "corrected ECC count"
        )
        if corrected is not None and corrected >= t.ecc_corrected_errors:
            reasons.append(("degraded", f"{corrected} corrected ECC errors in {window}"))
        retired = (health.retired_pages_single_bit or 0) + (health.retired_pages_double_bit or 0)
        if retired >= t.retired_pages:
            reasons.append(("degraded", f"{retired} retired memory pages"))
        if health.retired_pages_pending:
            reasons.append(("degraded", "a page retirement waits for a GPU reset"))
        if health.remap_failure:
            reasons.append(("unhealthy", "row remapping failed (the GPU needs service)"))
        elif health.remap_pending:
            reasons.append(("degraded", "a row remap waits for a GPU reset"))
        slow = [r for r in health.clocks_event_reasons or () if r in t.slowdown_reasons]
        if slow:
            reasons.append(("degraded", f"clocks held down: {', '.join(slow)}"))
        if (
            t.pcie_width_downtrained
            and gpu.pcie_width_current is not None
            and gpu.pcie_width_max is not None
            and gpu.pcie_width_current < gpu.pcie_width_max
        ):
            gen = f" Gen{gpu.pcie_gen_current}" if gpu.pcie_gen_current else ""
            reasons.append(
                (
                    "degraded",
                    f"PCIe link trained to x{gpu.pcie_width_current}{gen} of x{gpu.pcie_width_max}",
                )
            )
        fabric = health.fabric
        if fabric is not None:
            if fabric.state != "completed":
                reasons.append(("degraded", f"NVLink fabric registration {fabric.state}"))
            elif fabric.status not in (None, "Success"):
                reasons.append(("degraded", f"NVLink fabric probe failed: {fabric.status}"))
            if fabric.degraded_bandwidth:
                reasons.append(("degraded", "NVLink fabric bandwidth degraded"))
            if fabric.route_unhealthy:
                reasons.append(("degraded", "NVLink fabric route unhealthy"))
        xids = tuple(self.xids.get(uuid, ()))
        status: HealthStatus = "ok"
        for level, _ in reasons:
            if _RANK[level] > _RANK[status]:
                status = level
        judged = msgspec.structs.replace(
            health,
            nvlinks=tuple(link for link in links if _notable(link)),
            xids=xids,
            status=status,
            reasons=tuple(text for _, text in reasons),
        )
        out = msgspec.structs.replace(gpu, health=judged)
        if status == "unhealthy" and gpu.healthy:
            out = msgspec.structs.replace(
                out,
                healthy=False,
                health_reason="; ".join(text for lvl, text in reasons if lvl == "unhealthy"),
            )
        return out

    def _link(self, uuid: str, link: NvLinkHealth, now: float) -> NvLinkHealth:
        t = self.thresholds
        window = _minutes(t.window_s)
        port = self._ports.setdefault((uuid, link.link), _Port())
        steady = port.judged
        if (
            steady is not None
            and link == port.seen
            and link.up
            and not port.changes
            and steady.status == "ok"
            and steady.reason is None
            and steady.crc_in_window in (0, None)
            and steady.replay_in_window in (0, None)
            and steady.recovery_in_window in (0, None)
            and (link.crc_errors is None or steady.crc_in_window == 0)
        ):
            # same counters as last cycle, nothing in the window: the same verdict, and no
            # sample needed (the window's oldest reading already has this value)
            return steady
        if port.last_up is not None and port.last_up != link.up:
            port.changes.append(now)
        port.last_up = link.up
        while port.changes and port.changes[0] <= now - t.window_s:
            port.changes.popleft()
        port.down_streak = 0 if link.up else port.down_streak + 1

        name = f"NVLink {link.link}" + (f" (to {link.peer_bus_id})" if link.peer_bus_id else "")
        key = f"nvlink{link.link}"
        crc = self._rise(uuid, key + ".crc", link.crc_errors, now, f"{name} CRC count")
        replay = self._rise(uuid, key + ".replay", link.replay_errors, now, f"{name} replay count")
        recovery = self._rise(
            uuid, key + ".recovery", link.recovery_errors, now, f"{name} recovery count"
        )
        status: HealthStatus = "ok"
        reason: str | None = None
        if port.down_streak >= t.link_down_cycles:
            status, reason = "degraded", f"{name} down for {port.down_streak} cycles"
        elif len(port.changes) >= t.link_flaps:
            status = "degraded"
            reason = f"{name} flapping: {len(port.changes)} up/down changes in {window}"
        else:
            over = [
                f"{value:,} {what} errors"
                for value, limit, what in (
                    (crc, t.nvlink_crc_errors, "CRC"),
                    (replay, t.nvlink_replay_errors, "replay"),
                    (recovery, t.nvlink_recovery_errors, "recovery"),
                )
                if value is not None and value >= limit
            ]
            if over:
                status, reason = "degraded", f"{name} degraded: {', '.join(over)} in {window}"
        if reason is None:
            notes = [self._note(uuid, key + s) for s in (".crc", ".replay", ".recovery")]
            reason = next((n for n in notes if n), None)
            if reason is None and not link.up:
                reason = f"{name} down (seen {port.down_streak} of {t.link_down_cycles} cycles)"
        judged = msgspec.structs.replace(
            link,
            crc_in_window=crc,
            replay_in_window=replay,
            recovery_in_window=recovery,
            status=status,
            reason=reason,
        )
        port.seen, port.judged = link, judged
        return judged


def _notable(link: NvLinkHealth) -> bool:
    """Worth publishing: down, judged, explained, or with errors in the window. The others (a
    healthy NVSwitch node has 144 ports) are left out of what the agent publishes; a port not
    listed is up with no errors in the window (``topos discover`` still shows every port)."""
    return (
        not link.up
        or link.status != "ok"
        or link.reason is not None
        or any(v for v in (link.crc_in_window, link.replay_in_window, link.recovery_in_window))
    )


def summary(topology: NodeTopology) -> tuple[HealthStatus, str]:
    """The node's worst GPU status and a readable message (for the Node condition)."""
    worst: HealthStatus = "ok"
    parts: list[str] = []
    judged = 0
    for gpu in topology.gpus:
        if not gpu.healthy:
            worst = "unhealthy"
            parts.append(f"GPU{gpu.index} unhealthy: {gpu.health_reason or 'unhealthy'}")
            continue
        health = gpu.health
        if health is None:
            continue
        judged += 1
        if health.status != "ok":
            if _RANK[health.status] > _RANK[worst]:
                worst = health.status
            parts.append(f"GPU{gpu.index} {health.status}: {'; '.join(health.reasons)}")
    if not parts:
        return "ok", f"{judged} of {len(topology.gpus)} GPUs report health; all healthy"
    return worst, " | ".join(parts)
