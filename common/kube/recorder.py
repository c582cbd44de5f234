"""Events aggregated as kube's event recorder does: one Event object per object and reason, its
``count``, ``lastTimestamp`` and ``message`` brought up to date instead of a new Event each time.

``EventRecorder.record`` is the one way Topos components post Events about pods:

- **one Event per (object, reason, type, reporter)** — the first occurrence creates it; later
  ones update it (a merge patch of ``count``, ``lastTimestamp`` and the latest ``message``).
  ``kubectl describe`` then reads ``Warning FailedScheduling 3m (x5 over 10m) … <latest message>``;
- **written as a series, as kube-scheduler's recorder (client-go ``tools/events``) does** — a
  repeat is written at once when it brings a new message, or when it is the first repeat (the
  series starts: ``x2``); a repeat that only counts is kept in memory and written with the
  Event's next write, or ``series_flush_s`` (60 s) after its last write. kube writes such counts
  when the series ends (6 minutes without a repeat) or every 30 minutes; Topos' count in
  ``kubectl describe`` is at most a minute behind, at one write a minute for a pod that keeps
  failing the same way;
- **coalesced** — while a write for that Event is on its way, later occurrences only change what
  the next write says: at most one write per Event is pending at any time, however often it
  recurs;
- **rate-limited per object** — like client-go's spam filter: a token bucket per involved object
  (``burst`` 25, one token back every 5 minutes); an occurrence that finds none writes nothing
  now (its count is carried by the Event's next write);
- **deferrable** — every write yields the client's rate limit to binds and other requests
  (:class:`~common.kube.core.Deferrable`); Events never take a bind's turn;
- **bounded** — the last ``cache_size`` (4,096, client-go's) Events are remembered; an Event
  deleted meanwhile (they expire after an hour) is created again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from common.kube.core import Deferrable
from common.kube.errors import KubeError, NotFound
from common.kube.events import event_body, event_stamp
from common.kube.resources import EVENTS
from common.kube.types import ObjectReference
from common.kube.verbs import GenericVerbs

log = logging.getLogger(__name__)

__all__ = ["EventRecorder", "SpamFilter"]

_CACHE_SIZE: Final = 4096
#: How long a repeat that only counts may wait for its write (see the module docstring).
SERIES_FLUSH_S: Final = 60.0
_DEFERRABLE: Final = Deferrable()


class SpamFilter:
    """A token bucket per key (client-go's ``EventSourceObjectSpamFilter``: burst 25, one token
    back every 300 s); the least recently used keys beyond ``size`` are forgotten."""

    def __init__(
        self,
        *,
        burst: int = 25,
        per_s: float = 1 / 300,
        size: int = _CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_s = per_s
        self._size = size
        self._clock = clock
        self._buckets: OrderedDict[object, tuple[float, float]] = OrderedDict()  # tokens, when

    def allow(self, key: object) -> bool:
        now = self._clock()
        tokens, then = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.per_s)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self._size:
            self._buckets.popitem(last=False)
        return allowed


@dataclass(slots=True)
class _Event:
    reference: ObjectReference
    reason: str
    event_type: str
    action: str
    component: str
    instance: str
    message: str
    first: str
    last: str
    count: int = 1
    name: str = ""  # once created
    written: int = 0  # the count the API server has
    written_message: str = ""  # the message it has
    written_at: float = 0.0  # when (the recorder's clock)
    writing: bool = False
    later: bool = False  # a write of the count is due at ``written_at + series_flush_s``


class EventRecorder:
    """Posts Events through ``client`` (see the module docstring). Event-loop only."""

    def __init__(
        self,
        client: GenericVerbs,
        *,
        spam: SpamFilter | None = None,
        cache_size: int = _CACHE_SIZE,
        series_flush_s: float = SERIES_FLUSH_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._client = client
        self._spam = spam or SpamFilter()
        self._size = cache_size
        self._flush_s = series_flush_s
        self._clock = clock
        self._sleep = sleep
        self._events: OrderedDict[tuple[str, ...], _Event] = OrderedDict()
        self._later: set[asyncio.Task[None]] = set()

    async def record(
        self,
        regarding: ObjectReference,
        *,
        reason: str,
        message: str,
        event_type: str = "Normal",
        action: str = "",
        component: str = "topos",
        instance: str = "",
    ) -> None:
        """One occurrence: the Event created, or its count brought up to date (now, by the write
        already on its way, or by the series' next write). Raises the client's ``KubeError``
        when a write it makes fails."""
        namespace = reference_namespace(regarding)
        involved = regarding.get("uid") or regarding["name"]
        key = (namespace, regarding["kind"], involved, reason, event_type, component, instance)
        stamp = event_stamp()
        event = self._events.pop(key, None)
        if event is None:
            event = _Event(
                regarding, reason, event_type, action, component, instance, message, stamp, stamp
            )
        else:
            event.count += 1
            event.message = message
            event.last = stamp
        self._events[key] = event
        while len(self._events) > self._size:
            self._events.popitem(last=False)
        if event.writing:
            return  # the write on its way is followed by one with this occurrence
        await self._drain(event, due=False)

    async def _drain(self, event: _Event, *, due: bool) -> None:
        """Writes until the API server has every occurrence, or until what is left only counts
        and is not ``due``: that waits for the series' next write."""
        ref = event.reference
        spam_key = (reference_namespace(ref), ref["kind"], ref.get("uid") or ref["name"])
        event.writing = True
        try:
            while event.written < event.count:
                news = not event.name or event.message != event.written_message
                if not (due or news or event.written < 2):
                    self._write_later(event)
                    return
                if not self._spam.allow(spam_key):
                    log.debug("event %s on %s: spam filter", event.reason, spam_key)
                    return  # the Event's next write carries this occurrence
                await self._write(event)
                due = False
        finally:
            event.writing = False

    def _write_later(self, event: _Event) -> None:
        if event.later:
            return
        event.later = True
        task = asyncio.create_task(self._flush(event))
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def _flush(self, event: _Event) -> None:
        await self._sleep(max(0.0, event.written_at + self._flush_s - self._clock()))
        event.later = False
        if event.writing:
            return  # the write on its way carries the count
        try:
            await self._drain(event, due=True)
        except KubeError as exc:  # nobody awaits this write: log it
            log.warning("event %s on %s: %s", event.reason, event.reference.get("name"), exc)

    async def _write(self, event: _Event) -> None:
        count, message, last = event.count, event.message, event.last
        namespace = reference_namespace(event.reference)
        if event.name:
            try:
                await self._client.patch(
                    EVENTS,
                    event.name,
                    {"count": count, "lastTimestamp": last, "message": message[:1024]},
                    namespace=namespace,
                    deferrable=_DEFERRABLE,
                )
                self._written(event, count, message)
                return
            except NotFound:
                event.name = ""  # expired or deleted: create it again, with the count so far
        body = event_body(
            event.reference,
            reason=event.reason,
            message=message,
            event_type=event.event_type,
            action=event.action,
            component=event.component,
            instance=event.instance,
            count=count,
            first=event.first,
            last=last,
        )
        created = await self._client.create(
            EVENTS, body, namespace=namespace, deferrable=_DEFERRABLE
        )
        event.name = str((created.get("metadata") or {}).get("name") or body["metadata"]["name"])
        self._written(event, count, message)

    def _written(self, event: _Event, count: int, message: str) -> None:
        event.written, event.written_message, event.written_at = count, message, self._clock()


def reference_namespace(reference: ObjectReference) -> str:
    """Where Events about the object live (cluster-scoped objects: ``default``, as kubelet's)."""
    return reference.get("namespace") or "default"
