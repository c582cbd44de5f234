"""A pod's own preemption protections: ``topos.io/min-runtime`` (how long it runs before it may be
preempted or moved) and ``topos.io/preemption-delay`` (how long it waits, pending, before it
preempts), both in the duration grammar of :mod:`.durations`.

A value that does not parse is a :class:`~.fields.FieldError` naming the key and the value: a
pending pod carrying it is refused as any pod with a bad ``topos.io/*`` key is (its condition
says why); a running pod's is reported by the preemptor and the configured value used instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from common import podkeys
from coordinator.core.podspec.durations import DurationError, parse_duration
from coordinator.core.podspec.fields import FieldError, key_value, written_path

__all__ = ["min_runtime", "preemption_delay"]


def _duration(key: podkeys.Key, annotations: Mapping[str, str]) -> float | None:
    value = key_value(key, annotations)
    if value is None:
        return None
    if value.strip() in ("0", "0s"):
        return 0.0  # explicitly none
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise FieldError(written_path(key, annotations), str(exc)) from None


def min_runtime(annotations: Mapping[str, str]) -> float | None:
    """Seconds of ``topos.io/min-runtime`` (``None``: not given)."""
    return _duration(podkeys.MIN_RUNTIME, annotations)


def preemption_delay(annotations: Mapping[str, str]) -> float | None:
    """Seconds of ``topos.io/preemption-delay`` (``None``: not given)."""
    return _duration(podkeys.PREEMPTION_DELAY, annotations)
