"""The one duration grammar of every key Topos reads (today: ``topos.io/gang-timeout``).

Go/Kubernetes style: one or more ``<number><unit>`` parts with units ``h``, ``m``, ``s``, ``ms``,
``us`` (or ``µs``) and ``ns``, as in ``90s``, ``5m``, ``1h30m``, ``1.5h``, ``500ms``; or a bare
number of seconds (``300``). A leading ``+`` is allowed. The result must be positive and at most
7 days. Documented in docs/scheduling.md ("Durations").
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_DURATION_S", "DurationError", "parse_duration"]

MAX_DURATION_S: Final = 7 * 24 * 3600.0
_UNITS: Final = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
}
_NUMBER: Final = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART: Final = re.compile(rf"({_NUMBER})(h|ms|m|s|us|µs|ns)")
_WHOLE: Final = re.compile(rf"(?:{_NUMBER}(?:h|ms|m|s|us|µs|ns))+")
_BARE: Final = re.compile(_NUMBER)
_EXAMPLES: Final = "seconds or a duration such as 90s, 5m, 1h30m, 1.5h"


class DurationError(ValueError):
    """Text that is not a duration Topos accepts; the message says why and shows the forms."""


def parse_duration(value: str) -> float:
    """Seconds of ``value`` (``"300"``, ``"90s"``, ``"1h30m"``, ``"1.5h"``).

    Raises :class:`DurationError` for garbage, negative, zero and over-7-day durations.
    """
    raw = value.strip()
    if raw.startswith("-"):
        raise DurationError(f"duration {value!r} is negative: it must be positive")
    raw = raw.removeprefix("+")
    if _BARE.fullmatch(raw):
        seconds = float(raw)
    elif _WHOLE.fullmatch(raw):
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(raw))
    else:
        raise DurationError(f"malformed duration {value!r}: expected {_EXAMPLES}")
    if seconds <= 0:
        raise DurationError(f"duration {value!r} must be positive")
    if seconds > MAX_DURATION_S:
        raise DurationError(f"duration {value!r} is longer than 7 days")
    return seconds
