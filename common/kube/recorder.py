"""Events aggregated as kube's event recorder does: one Event object per object and reason, its
``count``, ``lastTimestamp`` and ``message`` brought up to date instead of a new Event each time.

``EventRecorder.record`` is the one way Topos components post Events about pods:

- **one Event per (object, reason, type, reporter)** — the first occurrence creates it; each
  later one updates it (a merge patch of ``count``, ``lastTimestamp`` and the latest
  ``message``), as client-go's ``EventCorrelator`` / ``tools/events`` series do. ``kubectl
  describe`` then reads ``Warning FailedScheduling 3m (x5 over 10m) … <latest message>``;
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

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from common.kube.core import Deferrable
from common.kube.errors import NotFound
from common.kube.events import event_body, event_stamp
from common.kube.resources import EVENTS
from common.kube.types import ObjectReference
from common.kube.verbs import GenericVerbs

log = logging.getLogger(__name__)

__all__ = ["EventRecorder", "SpamFilter"]

_CACHE_SIZE: Final = 4096
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
    writing: bool = False


class EventRecorder:
    """Posts Events through ``client`` (see the module docstring). Event-loop only."""

    def __init__(
        self,
        client: GenericVerbs,
        *,
        spam: SpamFilter | None = None,
        cache_size: int = _CACHE_SIZE,
    ) -> None:
        self._client = client
        self._spam = spam or SpamFilter()
        self._size = cache_size
        self._events: OrderedDict[tuple[str, ...], _Event] = OrderedDict()

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
        """One occurrence: the Event created, or its count brought up to date (now, or by the
        write already on its way). Raises the client's ``KubeError`` when the write fails."""
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
        event.writing = True
        try:
            while event.written < event.count:
                if not self._spam.allow((namespace, regarding["kind"], involved)):
                    log.debug("event %s on %s/%s: spam filter", reason, namespace, involved)
                    return  # the Event's next write carries this occurrence
                await self._write(event)
        finally:
            event.writing = False

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
                event.written = count
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
        event.written = count


def reference_namespace(reference: ObjectReference) -> str:
    """Where Events about the object live (cluster-scoped objects: ``default``, as kubelet's)."""
    return reference.get("namespace") or "default"
