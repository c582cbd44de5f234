"""How long a running pod will still run: the runtime sources a predicted start time uses.

In order, the first that answers wins, and the answer says which it was:

``annotation``  the pod's ``topos.io/expected-duration`` (the one duration grammar,
                ``core/podspec/durations.py``: ``90m``, ``1h30m``, ``7200``), counted from the
                pod's ``status.startTime``;
``deadline``    its Job's ``spec.activeDeadlineSeconds``, counted from the Job's
                ``status.startTime``: the Job controller ends it then at the latest;
``learned``     the median run time of the last pods of the same owner and shape that finished
                (:class:`RuntimeHistory`: the same controller — Job, JobSet's Job, ReplicaSet … —
                and the same GPU, MIG and CPU asks);
``unknown``     none of these: the pod is not expected to end.

A pod past its expected end is expected to end now (0 s left). A malformed annotation is no
answer (the next source is asked) and is named in :attr:`Runtime.note`, key and value.
"""

from __future__ import annotations

import datetime
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from common import podkeys
from coordinator.core.podspec.durations import DurationError, parse_duration

__all__ = [
    "EXPECTED_DURATION",
    "Runtime",
    "RuntimeHistory",
    "RuntimeSource",
    "expected_duration",
    "expected_runtime",
    "owner_and_shape",
]

EXPECTED_DURATION: Final = podkeys.EXPECTED_DURATION.canonical
RuntimeSource = Literal["annotation", "deadline", "learned", "unknown"]
OwnerShape = tuple[str, str, str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class Runtime:
    left_s: float | None  # seconds still to run from ``now``; None: unknown
    source: RuntimeSource
    note: str = ""  # why a source that was there gave no answer


def _time(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _started(pod: Mapping[str, Any]) -> float | None:
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    return _time(status.get("startTime")) or _time(meta.get("creationTimestamp"))


def owner_and_shape(pod: Mapping[str, Any]) -> OwnerShape:
    """``(namespace, owner kind, owner name, asks)``: pods alike enough to share a run time."""
    meta = pod.get("metadata") or {}
    owner = next(
        (r for r in meta.get("ownerReferences") or () if r.get("controller")),
        {"kind": "", "name": ""},
    )
    asks: dict[str, str] = {}
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            for name, value in (resources.get(part) or {}).items():
                asks[f"{part}/{name}"] = str(value)
    return (
        str(meta.get("namespace") or "default"),
        str(owner.get("kind") or ""),
        str(owner.get("name") or ""),
        tuple(sorted(asks.items())),
    )


class RuntimeHistory:
    """Run times of finished pods by owner and shape (the last ``kept`` of each)."""

    def __init__(self, *, kept: int = 20) -> None:
        self._kept = kept
        self._runs: dict[OwnerShape, deque[float]] = {}

    def observe(self, pod: Mapping[str, Any], ran_s: float) -> None:
        """A pod finished after running ``ran_s`` seconds (a pod with no owner teaches nothing:
        nothing else is its kind)."""
        key = owner_and_shape(pod)
        if ran_s <= 0 or not key[2]:
            return
        self._runs.setdefault(key, deque(maxlen=self._kept)).append(ran_s)

    def expected(self, pod: Mapping[str, Any]) -> float | None:
        runs = self._runs.get(owner_and_shape(pod))
        return statistics.median(runs) if runs else None


def expected_duration(pod: Mapping[str, Any], *, history: RuntimeHistory | None = None) -> Runtime:
    """How long a pending ``pod`` will run once it starts: its ``topos.io/expected-duration``,
    else what ``history`` learned of its owner and shape, else unknown."""
    notes = ""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXPECTED_DURATION)
    if raw is not None:
        try:
            return Runtime(parse_duration(str(raw)), "annotation")
        except DurationError as exc:
            notes = f"{EXPECTED_DURATION}: {raw!r}: {exc}"
    learned = history.expected(pod) if history is not None else None
    if learned is not None:
        return Runtime(learned, "learned", notes)
    return Runtime(None, "unknown", notes)


def expected_runtime(
    pod: Mapping[str, Any],
    *,
    now: float,
    job: Mapping[str, Any] | None = None,
    history: RuntimeHistory | None = None,
) -> Runtime:
    """How long ``pod`` (running) still runs, from ``now`` (Unix seconds); ``job``: its Job."""
    started = _started(pod)
    notes: list[str] = []
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXPECTED_DURATION)
    if raw is not None and started is not None:
        try:
            return Runtime(max(0.0, started + parse_duration(str(raw)) - now), "annotation")
        except DurationError as exc:
            notes.append(f"{EXPECTED_DURATION}: {raw!r}: {exc}")
    if job is not None:
        deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
        job_started = _time((job.get("status") or {}).get("startTime")) or started
        if isinstance(deadline, int | float) and deadline > 0 and job_started is not None:
            return Runtime(max(0.0, job_started + deadline - now), "deadline", "; ".join(notes))
    learned = history.expected(pod) if history is not None else None
    if learned is not None and started is not None:
        return Runtime(max(0.0, started + learned - now), "learned", "; ".join(notes))
    return Runtime(None, "unknown", "; ".join(notes))
