"""One list-then-watch loop, shared by every cache the coordinator keeps of the API server.

A :class:`Reflector` gets the current state of one resource (optionally one namespace, field and
label selectors), hands the whole of it to its handler's ``replace`` — a list *replaces* what the
handler holds, so objects deleted while nobody watched are dropped — and then watches from the
state's resourceVersion, handing each ``ADDED`` / ``MODIFIED`` / ``DELETED`` to ``apply``. The
state comes as a *watch list* where the API server offers it (the ``WatchList`` feature, on by
default since Kubernetes 1.34; kube-scheduler's informers do the same): one watch with
``sendInitialEvents=true``, whose ``ADDED`` events up to the bookmark annotated
``k8s.io/initial-events-end`` are the list, and which then goes on as the watch — one request
instead of a paged LIST (5,000 Nodes: 10 pages) and a WATCH. A server that refuses it (``422``,
the feature off; ``400``) or ends the stream before that bookmark is asked with a paged LIST from
then on. A watch the server ends is resumed from the last resourceVersion seen (bookmarks keep it
fresh); ``410 Gone`` syncs again the same way; other API errors back off with jitter (a ``404``
syncs again after it). With ``missing_ok`` a resource type the server does not serve (a CRD not
installed) counts as empty and is asked for again every ``absent_retry_s``.

Watch events are decoded here, line by line: by ``common.kube.watch``, or by the reflector's
own ``decode`` (:mod:`.watchdecode` decodes pods into only the parts their handlers read). With a
``fingerprint`` (:mod:`.watchdecode`), a ``MODIFIED`` event whose fingerprint equals that of the
last object handed over under the same identity is dropped before it is decoded into dicts (it
would change nothing the handler reads); ``on_unchanged`` counts them. What was handed over is
forgotten at every list; after a watch list, what it streamed counts as handed over (the
handler got those very objects), after a paged LIST nothing does.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final, Literal, Protocol

from common.kube import (
    BadRequest,
    Gone,
    Invalid,
    KubeClient,
    KubeError,
    KubeObject,
    NotFound,
    Resource,
    WatchEventType,
)
from common.kube.watch import parse_watch_line
from coordinator.adapters.kube.watchdecode import FingerprintOf

log = logging.getLogger(__name__)

__all__ = ["Change", "Handler", "Reflector"]

Change = Literal["ADDED", "MODIFIED", "DELETED"]
_PAGE: Final = 500
#: The annotation of the bookmark that ends a watch list's initial events.
INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"


class Handler(Protocol):
    def replace(self, items: list[KubeObject]) -> None:
        """The complete current list (first sync and every re-list)."""

    def apply(self, kind: Change, obj: KubeObject) -> None:
        """One change seen by the watch."""


class Reflector:
    """Event-loop only. ``synced`` is set after the first list (paged or streamed);
    ``on_listed`` runs after every list (re-lists included); ``relists`` counts the lists done,
    ``streamed`` those that came as a watch list."""

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
        self.streamed = 0
        self.watch_list = True  # False once the server refused a watch list: paged LISTs
        self._attempt = 0

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

    async def _absent(self) -> None:
        """The type is not served and ``missing_ok``: empty for now, asked for again later."""
        if self.installed:
            log.info("%s are not served by the API server; treating them as empty", self.what)
        self.installed = False
        self._listed([])
        await asyncio.sleep(self._absent_retry_s)

    async def _relist(self) -> str | None:
        """List and replace; ``None`` when the type is absent and ``missing_ok`` (retry later)."""
        try:
            items, rv = await self._list()
        except NotFound:
            if not self._missing_ok:
                raise
            await self._absent()
            return None
        self.installed = True
        self._listed(items)
        return rv

    async def run(self) -> None:
        rv: str | None = None
        while True:
            try:
                if rv is None and not self.watch_list:
                    rv = await self._relist()
                    if rv is None:
                        continue
                rv = await self._watch(rv)
            except Gone:
                log.info("watch of %s expired (410 Gone); syncing again", self.what)
                rv = None
            except (Invalid, BadRequest) as exc:
                if rv is None and self.watch_list:
                    log.info(
                        "the API server refuses a watch list of %s (%s); listing", self.what, exc
                    )
                    self.watch_list = False
                else:
                    await self._back_off(str(exc))
            except NotFound:
                if rv is None and self.watch_list and self._missing_ok:
                    await self._absent()
                else:
                    await self._back_off("not found")
                    rv = None
            except KubeError as exc:
                await self._back_off(str(exc))

    async def _back_off(self, why: str) -> None:
        delay = min(self._backoff_max_s, 0.5 * 2**self._attempt) * random.uniform(0.5, 1.0)
        self._attempt += 1
        log.warning("watch of %s failed (%s); retrying in %.1fs", self.what, why, delay)
        await asyncio.sleep(delay)

    async def _watch(self, rv: str | None) -> str | None:
        """One watch: from ``rv``, or (``None``) a watch list — the current state first, then
        the changes. The resourceVersion to resume from when the server ends it (``None``: a
        watch list ended before its state was complete; sync again by LIST)."""
        initial: _Initial | None = _Initial() if rv is None else None
        async for line in self._client.watch_lines(
            self.resource,
            namespace=self._namespace,
            field_selector=self._fields,
            label_selector=self._labels,
            resource_version=rv,
            timeout_seconds=self._watch_timeout_s,
            bookmarks=True,
            initial_events=initial is not None,
        ):
            self._attempt = 0
            if initial is None:
                rv = self._event(line, rv or "")
            elif (end := self._streaming(line, initial)) is not None:
                rv, initial = end, None
        if initial is not None:
            log.warning("watch list of %s ended before its last object; listing", self.what)
            self.watch_list = False
        return rv

    def _streaming(self, line: bytes, initial: _Initial) -> str | None:
        """Take one line of a watch list's initial events; at the bookmark that ends them,
        replace the handler's objects and return that resourceVersion."""
        seen = None if self._fingerprint is None else self._fingerprint(line)
        kind, obj = self._decoded(line)
        meta = obj.get("metadata") or {}
        if kind == "BOOKMARK":
            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) != "true":
                return None
            self.installed = True
            self.streamed += 1
            self._listed(list(initial.objects.values()))
            self._handed.update(initial.handed)
            return str(meta.get("resourceVersion") or "")
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        identity = seen[1][0] if seen is not None else ""
        if kind == "DELETED":
            initial.objects.pop(key, None)
            initial.handed.pop(identity, None)
            return None
        initial.objects[key] = obj
        if identity and seen is not None:
            initial.handed[identity] = seen[1][2]
        return None

    def _decoded(self, line: bytes) -> tuple[WatchEventType, KubeObject]:
        if self._decode is not None:
            return self._decode(line)
        kind, obj = parse_watch_line(line, self.resource)
        if self._slim is not None and kind != "BOOKMARK":
            obj = self._slim(obj)
        return kind, obj

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
        kind, obj = self._decoded(line)
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


class _Initial:
    """What a watch list has streamed so far: the objects by (namespace, name), in the order
    sent, and their fingerprints by identity."""

    __slots__ = ("handed", "objects")

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], KubeObject] = {}
        self.handed: dict[str, int] = {}
