"""One list-then-watch loop, shared by every cache the coordinator keeps of the API server.

A :class:`Reflector` lists one resource (paged; optionally one namespace, field and label
selectors), hands the whole list to its handler's ``replace`` — a list *replaces* what the
handler holds, so objects deleted while nobody watched are dropped — and then watches from the
list's resourceVersion, handing each ``ADDED`` / ``MODIFIED`` / ``DELETED`` to ``apply``. A watch
the server ends is resumed from the last resourceVersion seen (bookmarks keep it fresh); ``410
Gone`` re-lists; other API errors back off with jitter (a ``404`` re-lists after it). With
``missing_ok`` a resource type the server does not serve (a CRD not installed) counts as empty
and is listed again every ``absent_retry_s``.

Watch events are decoded here, line by line: by ``common.kube.watch``, or by the reflector's
own ``decode`` (:mod:`.watchdecode` decodes pods into only the parts their handlers read). With a
``fingerprint`` (:mod:`.watchdecode`), a ``MODIFIED`` event whose fingerprint equals that of the
last object handed over under the same identity is dropped before it is decoded into dicts (it
would change nothing the handler reads); ``on_unchanged`` counts them. What was handed over is
forgotten at every list, so the first event after a re-list always goes through.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final, Literal, Protocol

from common.kube import Gone, KubeClient, KubeError, KubeObject, NotFound, Resource, WatchEventType
from common.kube.watch import parse_watch_line
from coordinator.adapters.kube.watchdecode import FingerprintOf

log = logging.getLogger(__name__)

__all__ = ["Change", "Handler", "Reflector"]

Change = Literal["ADDED", "MODIFIED", "DELETED"]
_PAGE: Final = 500


class Handler(Protocol):
    def replace(self, items: list[KubeObject]) -> None:
        """The complete current list (first sync and every re-list)."""

    def apply(self, kind: Change, obj: KubeObject) -> None:
        """One change seen by the watch."""


class Reflector:
    """Event-loop only. ``synced`` is set after the first list; ``on_listed`` runs after every
    list (re-lists included); ``relists`` counts the lists done."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        handler: Handler,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        what: str | None = None,
        on_listed: Callable[[], None] | None = None,
        missing_ok: bool = False,
        slim: Callable[[KubeObject], KubeObject] | None = None,
        decode: Callable[[bytes], tuple[WatchEventType, KubeObject]] | None = None,
        fingerprint: FingerprintOf | None = None,
        on_unchanged: Callable[[], None] | None = None,
        watch_timeout_s: int = 300,
        backoff_max_s: float = 30.0,
        absent_retry_s: float = 15.0,
    ) -> None:
        """``what``: how log lines name the objects (default: the resource's plural). ``slim``:
        keeps of each object only what the handler reads, page by page as a list arrives (5,000
        Nodes as the API server sends them are some 85 MB of JSON, several times that as dicts).
        ``decode``: a watch line → ``(type, object)`` as ``slim`` would leave it (default: the
        whole object, then ``slim``). ``fingerprint`` / ``on_unchanged``: drop unchanged
        ``MODIFIED`` events (see above)."""
        self._client = client
        self.resource = resource
        self._handler = handler
        self._namespace = namespace
        self._fields = field_selector
        self._labels = label_selector
        self.what = what or resource.plural
        self._on_listed = on_listed
        self._missing_ok = missing_ok
        self._slim = slim
        self._decode = decode
        self._fingerprint = fingerprint
        self._on_unchanged = on_unchanged
        self._handed: dict[str, int] = {}  # identity → digest of the last object handed over
        self._watch_timeout_s = watch_timeout_s
        self._backoff_max_s = backoff_max_s
        self._absent_retry_s = absent_retry_s
        self.synced = asyncio.Event()
        self.installed = True  # False while the API server does not serve the type
        self.relists = 0

    async def _list(self) -> tuple[list[KubeObject], str]:
        items: list[KubeObject] = []
        token: str | None = None
        while True:
            page = await self._client.list(
                self.resource,
                namespace=self._namespace,
                field_selector=self._fields,
                label_selector=self._labels,
                limit=_PAGE,
                continue_token=token,
            )
            items.extend(page["items"] if self._slim is None else map(self._slim, page["items"]))
            token = page["continue"]
            if not token:
                return items, page["resourceVersion"]

    def _listed(self, items: list[KubeObject]) -> None:
        self.relists += 1
        self._handed.clear()
        self._handler.replace(items)
        self.synced.set()
        if self._on_listed is not None:
            self._on_listed()

    async def _relist(self) -> str | None:
        """List and replace; ``None`` when the type is absent and ``missing_ok`` (retry later)."""
        try:
            items, rv = await self._list()
        except NotFound:
            if not self._missing_ok:
                raise
            if self.installed:
                log.info("%s are not served by the API server; treating them as empty", self.what)
            self.installed = False
            self._listed([])
            await asyncio.sleep(self._absent_retry_s)
            return None
        self.installed = True
        self._listed(items)
        return rv

    async def run(self) -> None:
        attempt = 0
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    rv = await self._relist()
                    if rv is None:
                        continue
                async for line in self._client.watch_lines(
                    self.resource,
                    namespace=self._namespace,
                    field_selector=self._fields,
                    label_selector=self._labels,
                    resource_version=rv,
                    timeout_seconds=self._watch_timeout_s,
                    bookmarks=True,
                ):
                    attempt = 0
                    rv = self._event(line, rv)
                # The server ended the watch (timeoutSeconds): resume from rv.
            except Gone:
                log.info("watch of %s expired (410 Gone); re-listing", self.what)
                rv = None
            except KubeError as exc:
                delay = min(self._backoff_max_s, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
                attempt += 1
                log.warning("watch of %s failed (%s); retrying in %.1fs", self.what, exc, delay)
                await asyncio.sleep(delay)
                if isinstance(exc, NotFound):
                    rv = None

    def _event(self, line: bytes, rv: str) -> str:
        """Hand one watch line's change over (or drop it, unchanged); the resourceVersion to
        resume from after it."""
        seen = None if self._fingerprint is None else self._fingerprint(line)
        if seen is not None:
            kind, (identity, version, digest) = seen
            if kind == "MODIFIED" and identity and self._handed.get(identity) == digest:
                if self._on_unchanged is not None:
                    self._on_unchanged()
                return version or rv
        if self._decode is not None:
            kind, obj = self._decode(line)
        else:
            kind, obj = parse_watch_line(line, self.resource)
            if self._slim is not None and kind != "BOOKMARK":
                obj = self._slim(obj)
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
        if kind == "BOOKMARK":
            return rv
        self._handler.apply(kind, obj)
        if seen is not None and seen[1][0]:
            if kind == "DELETED":
                self._handed.pop(seen[1][0], None)
            else:
                self._handed[seen[1][0]] = seen[1][2]
        return rv
