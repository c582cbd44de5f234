"""``KubeClient``: the Kubernetes verbs Topos uses, over kubernetes_asyncio, as plain JSON.

Requests go through the library's ``ApiClient`` (authentication, TLS, token refresh) but ask for
the raw response and decode JSON ourselves: the generated models are slow to build, and some
replies (``pods/binding``) don't even deserialise. Every failure is a ``common.kube.errors``
exception raised ``from`` the library's; every call runs under one ``RetryPolicy``.

    async with await KubeClient.connect("kubeconfig") as kube:
        node = await kube.get(NODES, "gpu-1")
        async for kind, pod in kube.watch(PODS, namespace="ns", resource_version=rv):
            ...
"""

from __future__ import annotations

import builtins
import datetime
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, cast

import aiohttp
import msgspec
from kubernetes_asyncio.client import ApiClient

from common.kube.config import load_configuration
from common.kube.direct import DirectTransport
from common.kube.errors import KubeError, NotFound, Unreachable, error_for_status
from common.kube.ratelimit import RateLimit, TokenBucket
from common.kube.resources import EVENTS, LEASES, PODS, SERVICE_ACCOUNTS, TOKEN_REVIEWS, Resource
from common.kube.retry import RetryPolicy, call_with_retries
from common.kube.types import (
    JsonPatchOperation,
    KubeObject,
    ObjectList,
    ObjectReference,
    PatchType,
    TokenReviewResult,
    WatchEventType,
)
from common.kube.watch import parse_watch_line

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
_JSON_DECODER = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """How the client behaves; pass one to ``KubeClient.connect``."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Which failures are retried and how patiently."""
    request_timeout_s: float = 30.0
    """Limit on one ordinary request (not on watches)."""
    watch_idle_timeout_s: float = 330.0
    """A watch with no bytes for this long is considered dead (the server ends watches by
    ``timeoutSeconds``, default 5 minutes, and sends bookmarks about once a minute)."""
    field_manager: str = "topos"
    """Recorded in managedFields for our writes."""
    rate_limit: RateLimit | None = None
    """Client-side QPS/burst over every request of this client (``None``: no limit), as
    client-go's ``rest.Config.QPS``/``Burst``; see ``common.kube.ratelimit``."""


class KubeClient:
    """An async Kubernetes client returning JSON dicts. Close it (or use ``async with``)."""

    def __init__(self, api_client: Any, *, settings: ClientSettings | None = None) -> None:
        self._api = api_client
        self.settings = settings or ClientSettings()
        limit = self.settings.rate_limit
        self._bucket: TokenBucket | None = None if limit is None else TokenBucket(limit)
        self._request_timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout_s)
        self._transport = DirectTransport.of(api_client)

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        settings: ClientSettings | None = None,
    ) -> Self:
        """A client for ``kubeconfig`` (else ``$KUBECONFIG``, in-cluster, ``~/.kube/config``)."""
        configuration = await load_configuration(kubeconfig, context=context)
        api = ApiClient(configuration)
        _skip_environment_lookups(api)
        return cls(api, settings=settings)

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ----------------------------------------------------------------- transport

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """One HTTP exchange; a non-2xx reply becomes the matching ``KubeError``."""
        if self._bucket is not None:
            await self._bucket.wait()
        timeout = client_timeout or self._request_timeout
        try:
            if self._transport is not None:
                response = await self._transport.send(
                    method,
                    path,
                    query=query,
                    body=body,
                    content_type=content_type,
                    client_timeout=timeout,
                )
            else:
                response = cast(
                    aiohttp.ClientResponse,
                    await self._api.call_api(
                        path,
                        method,
                        query_params=list((query or {}).items()),
                        header_params={"Content-Type": content_type, "Accept": "application/json"},
                        body=body,
                        auth_settings=["BearerToken"],
                        _preload_content=False,
                        _request_timeout=timeout,
                    ),
                )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unreachable(f"{method} {path}: {exc or type(exc).__name__}") from exc
        if 200 <= response.status < 300:
            return response
        try:
            raw = await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Unreachable(f"{method} {path}: {exc}") from exc
        finally:
            response.release()
        raise _error_from_reply(response, raw, method, path)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> KubeObject:
        """A request whose reply is one JSON object, under the retry policy."""

        async def attempt() -> KubeObject:
            response = await self._send(
                method, path, query=query, body=body, content_type=content_type
            )
            try:
                raw = await response.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise Unreachable(f"{method} {path}: {exc}") from exc
            finally:
                response.release()
            try:
                decoded = _JSON_DECODER.decode(raw) if raw else {}
            except msgspec.DecodeError as exc:
                raise KubeError(f"{method} {path}: reply is not JSON: {exc}") from exc
            if not isinstance(decoded, dict):
                raise KubeError(f"{method} {path}: reply is not a JSON object")
            return decoded

        return await call_with_retries(self.settings.retry, method, attempt)

    # ----------------------------------------------------------------- generic verbs

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
        query = _selectors(label_selector, field_selector)
        query["watch"] = "true"
        if resource_version is not None:
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
            while True:
                try:
                    line = await response.content.readline()
                except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
                    raise Unreachable(f"watch {path} broke: {exc or type(exc).__name__}") from exc
                if not line:
                    return
                if not line.strip():
                    continue
                yield parse_watch_line(line, resource)
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
    ) -> KubeObject:
        """POST ``body``; with ``subresource`` (and ``name``) to that subresource instead."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        return await self._call(
            "POST", path, body=dict(body), query={"fieldManager": self.settings.field_manager}
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
    ) -> KubeObject:
        """Merge (RFC 7386), strategic-merge or JSON (RFC 6902) patch; ``subresource="status"``
        patches the status. A JSON patch ``test`` op that fails raises ``Invalid``."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        body: Any = list(patch) if isinstance(patch, list) else dict(patch)
        return await self._call(
            "PATCH",
            path,
            body=body,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            query={"fieldManager": self.settings.field_manager},
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
    ) -> KubeObject:
        """Delete; ``uid``/``resource_version`` preconditions make it fail with ``Conflict`` if the
        object was replaced or changed meanwhile. Returns the server's reply (object or Status)."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
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
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        query = _selectors(label_selector, field_selector)
        path = resource.path(namespace=namespace)
        return await self._call("DELETE", path, query=query, body=options)

    # ----------------------------------------------------------------- pods

    async def bind(
        self,
        *,
        namespace: str,
        pod: str,
        node: str,
        pod_uid: str | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Bind a pending pod to a node through the ``pods/binding`` subresource.

        With ``pod_uid`` the bind fails (``Conflict``) if the pod was recreated under the same
        name; binding an already bound pod is a ``Conflict`` too. ``annotations`` are set on the
        pod by the API server in the same update that sets ``spec.nodeName`` (the Binding's
        annotations are copied onto the pod), so one request both records and binds.
        """
        metadata: dict[str, Any] = {"name": pod, "namespace": namespace}
        if pod_uid is not None:
            metadata["uid"] = pod_uid
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create(PODS, body, namespace=namespace, name=pod, subresource="binding")

    async def evict(
        self, *, namespace: str, pod: str, grace_period_seconds: int | None = None
    ) -> None:
        """Evict through ``pods/eviction`` (honours PodDisruptionBudgets: a blocked eviction
        raises ``TooManyRequests``)."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        if grace_period_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
        await self.create(PODS, body, namespace=namespace, name=pod, subresource="eviction")

    # ----------------------------------------------------------------- events

    async def create_event(
        self,
        *,
        regarding: KubeObject | ObjectReference,
        reason: str,
        message: str,
        event_type: str = "Normal",
        action: str = "",
        component: str = "topos",
        instance: str = "",
    ) -> KubeObject:
        """Post a core/v1 Event about an object (what ``kubectl describe`` shows under Events).

        ``regarding`` may be the object itself or an ObjectReference; cluster-scoped objects
        (Nodes) get their Event in the ``default`` namespace, as the kubelet does.
        """
        reference = object_reference(regarding)
        namespace = reference.get("namespace") or "default"
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{reference['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": dict(reference),
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": instance or component,
            # the legacy timestamps only: with eventTime set the API server demands the
            # events.k8s.io fields (action, reportingController) and rejects the rest
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if action:
            body["action"] = action
        return await self.create(EVENTS, body, namespace=namespace)

    # ----------------------------------------------------------------- leases

    async def get_lease(self, *, namespace: str, name: str) -> KubeObject | None:
        """The Lease, or ``None`` if there is none yet."""
        try:
            return await self.get(LEASES, name, namespace=namespace)
        except NotFound:
            return None

    async def create_lease(
        self, *, namespace: str, name: str, spec: Mapping[str, Any]
    ) -> KubeObject:
        """Create a Lease (``AlreadyExists`` if someone else did first)."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec),
        }
        return await self.create(LEASES, body, namespace=namespace)

    async def update_lease(self, lease: KubeObject, spec: Mapping[str, Any]) -> KubeObject:
        """Replace the Lease's spec, guarded by the resourceVersion it was read at (``Conflict``
        if another holder wrote it since)."""
        metadata = lease["metadata"]
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "resourceVersion": metadata["resourceVersion"],
            },
            "spec": dict(spec),
        }
        return await self.replace(LEASES, metadata["name"], body, namespace=metadata["namespace"])

    # ----------------------------------------------------------------- authentication

    async def review_token(
        self, token: str, *, audiences: builtins.list[str] | None = None
    ) -> TokenReviewResult:
        """Ask the API server who holds ``token`` (TokenReview). Unauthenticated is a result,
        not an error: ``authenticated`` is ``False`` and ``error`` says why."""
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        reply = await self.create(TOKEN_REVIEWS, body)
        status = reply.get("status") or {}
        user = status.get("user") or {}
        return {
            "authenticated": bool(status.get("authenticated")),
            "username": str(user.get("username", "")),
            "uid": str(user.get("uid", "")),
            "groups": list(user.get("groups") or []),
            "audiences": list(status.get("audiences") or []),
            "extra": dict(user.get("extra") or {}),
            "error": str(status.get("error", "")),
        }

    async def request_token(
        self,
        *,
        namespace: str,
        service_account: str,
        audiences: builtins.list[str] | None = None,
        expiration_seconds: int = 3600,
        bound_pod: KubeObject | None = None,
    ) -> str:
        """A token for a ServiceAccount (TokenRequest), optionally bound to a pod's lifetime."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        if bound_pod is not None:
            spec["boundObjectRef"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": bound_pod["metadata"]["name"],
                "uid": bound_pod["metadata"]["uid"],
            }
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        reply = await self.create(
            SERVICE_ACCOUNTS, body, namespace=namespace, name=service_account, subresource="token"
        )
        return str(reply["status"]["token"])

    async def version(self) -> KubeObject:
        """The server's ``/version`` (``gitVersion``, ``major``, ``minor``, …)."""
        return await self._call("GET", "/version")


def object_reference(obj: KubeObject | ObjectReference) -> ObjectReference:
    """An ObjectReference to ``obj`` (a full object or already a reference)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        reference: ObjectReference = {
            "apiVersion": str(obj["apiVersion"]),
            "kind": str(obj["kind"]),
            "name": str(metadata["name"]),
        }
        for key in ("namespace", "uid", "resourceVersion"):
            if metadata.get(key):
                reference[key] = str(metadata[key])
        return reference
    return cast(ObjectReference, dict(obj))


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _skip_environment_lookups(api: Any) -> None:
    """Stop aiohttp from consulting the environment on every request when that can't matter.

    kubernetes_asyncio opens its session with ``trust_env=True``, so for *each* request aiohttp
    looks for proxy variables and a ``~/.netrc`` entry, both in worker threads: two thread hops
    per call (py-spy: the largest per-request cost of the coordinator under load, beside TLS).
    With no proxy variable set neither lookup can change a request to the API server (its
    credentials are the kubeconfig's certificate or token, never netrc), so switch them off;
    with one set, keep aiohttp's behaviour.
    """
    if any(os.environ.get(v) or os.environ.get(v.upper()) for v in _PROXY_VARIABLES):
        return
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if isinstance(session, aiohttp.ClientSession) and hasattr(session, "_trust_env"):
        session._trust_env = False


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str | int]:
    query: dict[str, str | int] = {}
    if label_selector:
        query["labelSelector"] = label_selector
    if field_selector:
        query["fieldSelector"] = field_selector
    return query


def _error_from_reply(
    response: aiohttp.ClientResponse, raw: bytes, method: str, path: str
) -> KubeError:
    body: dict[str, Any] | None = None
    try:
        decoded = _JSON_DECODER.decode(raw) if raw else None
        if isinstance(decoded, dict):
            body = decoded
    except msgspec.DecodeError:
        body = None
    if body is None:
        text = raw.decode("utf-8", "replace").strip()[:300]
        body = {"message": f"{method} {path}: {text or response.reason or 'no body'}"}
    retry_after: float | None = None
    header = response.headers.get("Retry-After")
    if header:
        try:
            retry_after = float(header)
        except ValueError:
            retry_after = None
    return error_for_status(response.status, body, retry_after_s=retry_after)
