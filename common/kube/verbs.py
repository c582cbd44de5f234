"""The generic verbs, for any ``Resource``: get, list, watch, create, replace, patch, delete,
delete_collection, and the server's version."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import aiohttp

from common.kube.core import Deferrable, KubeClientCore
from common.kube.errors import Unreachable
from common.kube.resources import Resource
from common.kube.retry import call_with_retries
from common.kube.types import JsonPatchOperation, KubeObject, ObjectList, PatchType, WatchEventType
from common.kube.watch import parse_watch_line, stream_lines

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


class GenericVerbs(KubeClientCore):
    """Verbs on any resource, returning plain JSON dicts."""

    async def get(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> KubeObject:
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return await self._call("GET", path)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        resource_version_match: Literal["Exact", "NotOlderThan"] | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ObjectList:
        """One page (all items unless ``limit``); ``namespace=None`` lists across namespaces.

        ``resource_version`` with ``resource_version_match="Exact"`` reads the state at that
        version (``Gone`` once etcd compacted it away)."""
        query = _selectors(label_selector, field_selector)
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        if resource_version_match is not None:
            query["resourceVersionMatch"] = resource_version_match
        if limit is not None:
            query["limit"] = limit
        if continue_token:
            query["continue"] = continue_token
        reply = await self._call("GET", resource.path(namespace=namespace), query=query)
        metadata = reply.get("metadata") or {}
        kind = resource.kind
        items: builtins.list[KubeObject] = reply.get("items") or []
        for item in items:  # list items come without apiVersion/kind; restore them
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", kind)
        return {
            "items": items,
            "resourceVersion": str(metadata.get("resourceVersion", "")),
            "continue": str(metadata.get("continue", "")),
        }

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        bookmarks: bool = False,
    ) -> AsyncIterator[tuple[WatchEventType, KubeObject]]:
        """Changes after ``resource_version`` as ``(type, object)`` until the server ends the watch.

        Raises ``Gone`` when that resourceVersion is too old (re-list, then watch from the list's
        resourceVersion), ``Unreachable`` when the stream breaks. ``BOOKMARK`` events (only with
        ``bookmarks=True``) carry just a newer resourceVersion.
        """
        async for line in self.watch_lines(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            bookmarks=bookmarks,
        ):
            yield parse_watch_line(line, resource)

    async def watch_lines(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        bookmarks: bool = False,
        initial_events: bool = False,
    ) -> AsyncIterator[bytes]:
        """As :meth:`watch`, each event as its undecoded line (``common.kube.watch`` decodes
        them): for callers that decode only what they read.

        ``initial_events`` (a *watch list*, ``resource_version`` left out): the server first
        sends every current object as ``ADDED``, then a ``BOOKMARK`` annotated
        ``k8s.io/initial-events-end: "true"`` at the state's resourceVersion, then the changes.
        A server without the ``WatchList`` feature refuses it with ``Invalid`` (422)."""
        query = _selectors(label_selector, field_selector)
        query["watch"] = "true"
        if initial_events:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
            bookmarks = True
        elif resource_version is not None:
            query["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            query["timeoutSeconds"] = timeout_seconds
        if bookmarks:
            query["allowWatchBookmarks"] = "true"
        path = resource.path(namespace=namespace)
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.settings.request_timeout_s,
            sock_read=self.settings.watch_idle_timeout_s,
        )
        response = await call_with_retries(
            self.settings.retry,
            "GET",
            lambda: self._send("GET", path, query=query, client_timeout=timeout),
        )
        try:
            async for line in stream_lines(response.content.readany):
                yield line
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            raise Unreachable(f"watch {path} broke: {exc or type(exc).__name__}") from exc
        finally:
            response.release()

    async def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        name: str | None = None,
        deferrable: Deferrable | None = None,
    ) -> KubeObject:
        """POST ``body``; with ``subresource`` (and ``name``) to that subresource instead."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return await self._call(
            "POST",
            path,
            body=dict(body),
            query={"fieldManager": self.settings.field_manager},
            deferrable=deferrable,
        )

    async def replace(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> KubeObject:
        """PUT ``body``; include ``metadata.resourceVersion`` to fail with ``Conflict`` on races."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return await self._call(
            "PUT", path, body=dict(body), query={"fieldManager": self.settings.field_manager}
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | builtins.list[JsonPatchOperation],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        deferrable: Deferrable | None = None,
    ) -> KubeObject:
        """Merge (RFC 7386), strategic-merge or JSON (RFC 6902) patch; ``subresource="status"``
        patches the status. A JSON patch ``test`` op that fails raises ``Invalid``.
        ``deferrable``: see :class:`~common.kube.core.Deferrable`."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        body: Any = list(patch) if isinstance(patch, list) else dict(patch)
        return await self._call(
            "PATCH",
            path,
            body=body,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            query={"fieldManager": self.settings.field_manager},
            deferrable=deferrable,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation_policy: Literal["Orphan", "Background", "Foreground"] | None = None,
    ) -> KubeObject:
        """Delete; ``uid``/``resource_version`` preconditions make it fail with ``Conflict`` if the
        object was replaced or changed meanwhile; ``propagation_policy`` says what the garbage
        collector does with its dependents (the resource's default when ``None``). Returns the
        server's reply (object or Status)."""
        options = _delete_options(grace_period_seconds)
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        preconditions = {
            key: value
            for key, value in (("uid", uid), ("resourceVersion", resource_version))
            if value is not None
        }
        if preconditions:
            options["preconditions"] = preconditions
        path = resource.path(namespace=namespace, name=name)
        return await self._call("DELETE", path, body=options)

    async def delete_collection(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> KubeObject:
        """Delete every matching object in one request (``deletecollection``)."""
        options = _delete_options(grace_period_seconds)
        query = _selectors(label_selector, field_selector)
        path = resource.path(namespace=namespace)
        return await self._call("DELETE", path, query=query, body=options)

    async def version(self) -> KubeObject:
        """The server's ``/version`` (``gitVersion``, ``major``, ``minor``, …)."""
        return await self._call("GET", "/version")


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str | int]:
    query: dict[str, str | int] = {}
    if label_selector:
        query["labelSelector"] = label_selector
    if field_selector:
        query["fieldSelector"] = field_selector
    return query


def _delete_options(grace_period_seconds: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    return options
