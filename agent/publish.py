"""Publishing labels and annotations on the agent's own Node (docs/design.md §2).

Computing what should be on the Node (``common.labeling``) is separate from getting it there. This
module diffs the desired set against the Node as the API server has it and sends one JSON merge
patch with only the differences, or nothing at all when the Node already carries them: a steady
node costs one GET per cycle and no writes.

Ownership: the agent records the keys it wrote in the annotation ``topos.io/owned-keys``. A key
is removed only when it is in that record, under one of the agent's prefixes, and no longer
produced. Keys written by people or other programs — ``topos.io/leaf``, a label GFD wrote, a
cloud provider's labels — are never touched unless the agent itself produces the same key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from common import labels as L
from common.labels import NodeLabels

log = logging.getLogger("topos.agent.publish")

JsonPatch = dict[str, Any]


#: Labels the agent writes only where nobody else has: a Node whose GPU Feature Discovery already
#: wrote ``nvidia.com/gpu.clique`` keeps GFD's value, and the agent does not take the key over.
DEFER_TO_OTHERS: Final = frozenset({L.GFD_GPU_CLIQUE})


class NodeApi(Protocol):
    """The Node verbs the publisher needs (``agent.kube`` adapts the Kubernetes client)."""

    async def get_node_metadata(self, name: str) -> NodeMetadata:
        """The Node's labels and annotations; raises ``NodeNotFound`` when there is no Node."""
        ...

    async def patch_node_metadata(self, name: str, patch: JsonPatch) -> NodeMetadata:
        """Apply a JSON merge patch to the Node and return its metadata after the patch."""
        ...

    async def patch_node_status(self, name: str, patch: JsonPatch) -> None:
        """Apply a strategic merge patch to the Node's status (conditions merge by type)."""
        ...


class NodeNotFound(LookupError):
    """The Node named by ``NODE_NAME``/``--node`` does not exist in the API server."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"node {name!r} not found in the API server (is NODE_NAME / --node the Node's name?)"
        )
        self.name = name


@dataclass(frozen=True, slots=True)
class NodeMetadata:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    conditions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # by type

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeMetadata:
        """From a raw Node object (``{"metadata": {"labels": …, "annotations": …}}``)."""
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        conditions = {
            str(c.get("type")): c for c in status.get("conditions") or () if isinstance(c, dict)
        }
        return cls(
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            conditions=conditions,
        )


@dataclass(frozen=True, slots=True)
class Condition:
    """A Node condition the agent owns (``status``: "True" / "False")."""

    type: str
    status: str
    reason: str
    message: str


def condition_patch(current: NodeMetadata, desired: Condition, now: str) -> JsonPatch | None:
    """The status patch that sets ``desired`` (``None`` when the Node already says the same);
    ``lastTransitionTime`` moves only when the status flips."""
    old = current.conditions.get(desired.type)
    same = old is not None and all(
        old.get(k) == getattr(desired, k) for k in ("status", "reason", "message")
    )
    if same:
        return None
    flipped = old is None or old.get("status") != desired.status
    since = now if flipped else str((old or {}).get("lastTransitionTime") or now)
    return {
        "status": {
            "conditions": [
                {
                    "type": desired.type,
                    "status": desired.status,
                    "reason": desired.reason,
                    "message": desired.message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": since,
                }
            ]
        }
    }


@dataclass(frozen=True, slots=True)
class OwnedKeys:
    labels: frozenset[str] = frozenset()
    annotations: frozenset[str] = frozenset()

    def encode(self) -> str:
        return json.dumps(
            {"labels": sorted(self.labels), "annotations": sorted(self.annotations)},
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str | None) -> OwnedKeys:
        """Tolerant: a missing or garbled record means "owns nothing" (logged), never a crash —
        the worst outcome is a stale key left in place, never a foreign key removed."""
        if text is None:
            return cls()
        try:
            data = json.loads(text)
            labels = data["labels"]
            annotations = data["annotations"]
            if not all(isinstance(k, str) for k in [*labels, *annotations]):
                raise TypeError("keys must be strings")
        except (ValueError, TypeError, KeyError) as exc:
            log.warning(
                "ignoring malformed ownership record",
                extra={"annotation": L.OWNED_KEYS, "error": str(exc)},
            )
            return cls()
        return cls(labels=frozenset(labels), annotations=frozenset(annotations))


@dataclass(frozen=True, slots=True)
class PatchPlan:
    """What one publish would change; ``patch`` is ``None`` when nothing would."""

    patch: JsonPatch | None
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def _ours(key: str) -> bool:
    return key.startswith(L.AGENT_PREFIXES)


def _diff(
    current: Mapping[str, str],
    desired: Mapping[str, str],
    previously_owned: frozenset[str],
    kind: str,
    added: list[str],
    changed: list[str],
    removed: list[str],
) -> dict[str, str | None]:
    patch: dict[str, str | None] = {}
    for key, value in desired.items():
        old = current.get(key)
        if old != value:
            patch[key] = value
            (added if old is None else changed).append(f"{kind}:{key}")
    for key in sorted(previously_owned - desired.keys()):
        if key in current and _ours(key):
            patch[key] = None  # JSON merge patch: null removes the key
            removed.append(f"{kind}:{key}")
    return patch


def plan_patch(current: NodeMetadata, desired: NodeLabels) -> PatchPlan:
    """The merge patch that takes ``current`` to carry ``desired``, removing our stale keys."""
    owned_before = OwnedKeys.decode(current.annotations.get(L.OWNED_KEYS))
    deferred = {
        k
        for k in DEFER_TO_OTHERS
        if k in desired.labels and k in current.labels and k not in owned_before.labels
    }
    if deferred:  # written by someone else (GFD): theirs stands, and stays theirs
        desired = NodeLabels(
            labels={k: v for k, v in desired.labels.items() if k not in deferred},
            annotations=desired.annotations,
        )
    owned_now = OwnedKeys(
        labels=frozenset(desired.labels), annotations=frozenset(desired.annotations)
    )
    want_annotations = {**desired.annotations, L.OWNED_KEYS: owned_now.encode()}
    added: list[str] = []
    changed: list[str] = []
    removed: list[str] = []
    label_patch = _diff(
        current.labels, desired.labels, owned_before.labels, "label", added, changed, removed
    )
    annotation_patch = _diff(
        current.annotations,
        want_annotations,
        owned_before.annotations,
        "annotation",
        added,
        changed,
        removed,
    )
    if not label_patch and not annotation_patch:
        return PatchPlan(patch=None)
    metadata: dict[str, Any] = {}
    if label_patch:
        metadata["labels"] = label_patch
    if annotation_patch:
        metadata["annotations"] = annotation_patch
    return PatchPlan(
        patch={"metadata": metadata},
        added=tuple(added),
        changed=tuple(changed),
        removed=tuple(removed),
    )


@dataclass(frozen=True, slots=True)
class PublishResult:
    patched: bool
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    condition_patched: bool = False


class NodePublisher:
    """Keeps one Node's labels/annotations equal to what the labelers produce."""

    def __init__(self, api: NodeApi, node_name: str) -> None:
        self._api = api
        self._node = node_name

    @property
    def node_name(self) -> str:
        return self._node

    async def publish(
        self, desired: NodeLabels, condition: Condition | None = None, now: str = ""
    ) -> PublishResult:
        """Labels and annotations (and ``condition``, when given) from one GET; a PATCH only
        for what changed (``now``: RFC 3339 time for the condition's timestamps)."""
        current = await self._api.get_node_metadata(self._node)
        status_patched = False
        if condition is not None:
            status_patch = condition_patch(current, condition, now)
            if status_patch is not None:
                await self._api.patch_node_status(self._node, status_patch)
                status_patched = True
                log.info(
                    "published node condition",
                    extra={
                        "node": self._node,
                        "condition": condition.type,
                        "status": condition.status,
                        "reason": condition.reason,
                    },
                )
        plan = plan_patch(current, desired)
        if plan.patch is None:
            return PublishResult(patched=False, condition_patched=status_patched)
        await self._api.patch_node_metadata(self._node, plan.patch)
        log.info(
            "published node labels",
            extra={
                "node": self._node,
                "added": len(plan.added),
                "changed": len(plan.changed),
                "removed": list(plan.removed),
            },
        )
        return PublishResult(
            patched=True,
            added=plan.added,
            changed=plan.changed,
            removed=plan.removed,
            condition_patched=status_patched,
        )
