"""Shapes of the raw JSON the API server exchanges, for the payloads Topos builds or reads.

Objects read back are plain ``dict``s (``KubeObject``); these TypedDicts document and check the
bodies we send.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

KubeObject = dict[str, Any]
"""Any object as the API server returns it (``apiVersion``, ``kind``, ``metadata``, …)."""

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
PatchType = Literal["merge", "strategic", "json"]


class ObjectReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    namespace: NotRequired[str]
    uid: NotRequired[str]
    resourceVersion: NotRequired[str]


ObjectList = TypedDict(
    "ObjectList",
    {"items": list[KubeObject], "resourceVersion": str, "continue": str},
)
"""What a list returns: the items, the resourceVersion to start a watch from, and the token for
the next page (``""`` on the last one)."""


class JsonPatchOperation(TypedDict):
    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str
    value: NotRequired[Any]


class TokenReviewResult(TypedDict):
    """``status`` of a TokenReview: who the bearer of a token is, if anyone."""

    authenticated: bool
    username: str
    uid: str
    groups: list[str]
    audiences: list[str]
    extra: dict[str, list[str]]
    error: str
