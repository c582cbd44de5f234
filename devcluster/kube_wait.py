"""Waiting for the real API server by watch: react to the change, never sleep a fixed time.

:func:`wait_for` lists the objects a selector names, offers them to ``check``, then watches from
that list's resourceVersion and offers the updated set after every change, until ``check``
returns something other than ``None``. A watch the server ends, or one that breaks or is
``Gone``, is followed by a fresh list. The timeout only guards a hang: it is generous, and
running out fails the test with what was last seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from common.kube import EVENTS, PODS, Gone, KubeClient, Resource, Unreachable

T = TypeVar("T")
KubeObject = dict[str, Any]

DEFAULT_TIMEOUT_S = 120.0
"""Long enough for a busy two-core machine; a healthy run takes a fraction of a second."""


def _key(obj: KubeObject) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


async def wait_for(
    kube: KubeClient,
    resource: Resource,
    check: Callable[[Sequence[KubeObject]], T | None],
    *,
    namespace: str | None = None,
    name: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "",
) -> T:
    """The first non-``None`` value of ``check(objects)`` as the watched objects change."""
    fields = [f for f in (field_selector, f"metadata.name={name}" if name else None) if f]
    selector = ",".join(fields) or None
    seen: dict[tuple[str, str], KubeObject] = {}
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                listed = await kube.list(
                    resource,
                    namespace=namespace,
                    label_selector=label_selector,
                    field_selector=selector,
                )
                seen = {_key(o): o for o in listed["items"]}
                found = check(list(seen.values()))
                if found is not None:
                    return found
                try:
                    async for kind, obj in kube.watch(
                        resource,
                        namespace=namespace,
                        label_selector=label_selector,
                        field_selector=selector,
                        resource_version=listed["resourceVersion"],
                        timeout_seconds=30,
                    ):
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            seen.pop(_key(obj), None)
                        else:
                            seen[_key(obj)] = obj
                        found = check(list(seen.values()))
                        if found is not None:
                            return found
                except (Gone, Unreachable):
                    pass  # list again
    except TimeoutError:
        names = sorted(n for _, n in seen)
        raise AssertionError(
            f"gave up after {timeout_s:.0f} s waiting for {what or resource.kind}; "
            f"last seen: {names or 'nothing'}"
        ) from None


async def wait_for_object(
    kube: KubeClient,
    resource: Resource,
    name: str,
    check: Callable[[KubeObject], bool],
    *,
    namespace: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "",
) -> KubeObject:
    """The object ``name`` once ``check(object)`` holds."""

    def one(objects: Sequence[KubeObject]) -> KubeObject | None:
        return next((o for o in objects if check(o)), None)

    return await wait_for(
        kube,
        resource,
        one,
        namespace=namespace,
        name=name,
        timeout_s=timeout_s,
        what=what or f"{resource.kind} {name}",
    )


async def wait_for_bound(kube: KubeClient, namespace: str, name: str) -> KubeObject:
    """Pod ``name`` once it has a node."""
    return await wait_for_object(
        kube,
        PODS,
        name,
        lambda p: bool(p["spec"].get("nodeName")),
        namespace=namespace,
        what=f"pod {name} to be bound",
    )


async def wait_for_event(
    kube: KubeClient,
    namespace: str,
    *,
    reason: str,
    name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> KubeObject:
    """The first Event with ``reason`` (about the object ``name``, when given) in ``namespace``."""
    fields = [f"reason={reason}"] + ([f"involvedObject.name={name}"] if name else [])
    return await wait_for(
        kube,
        EVENTS,
        lambda events: events[0] if events else None,
        namespace=namespace,
        field_selector=",".join(fields),
        timeout_s=timeout_s,
        what=f"a {reason} Event" + (f" about {name}" if name else ""),
    )


def scheduled_message(pod: KubeObject, *, status: str | None = None) -> str | None:
    """The message of the pod's ``PodScheduled`` condition (of that ``status``), if any."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and status in (None, cond.get("status")):
            return str(cond.get("message", ""))
    return None


async def wait_for_pods(
    kube: KubeClient,
    namespace: str,
    check: Callable[[Sequence[KubeObject]], T | None],
    *,
    label_selector: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "pods",
) -> T:
    """:func:`wait_for` on the pods of ``namespace``."""
    return await wait_for(
        kube,
        PODS,
        check,
        namespace=namespace,
        label_selector=label_selector,
        timeout_s=timeout_s,
        what=what,
    )
