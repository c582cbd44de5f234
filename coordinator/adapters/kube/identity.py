"""Who is calling: the identity a TokenReview vouches for, and what it may report.

A ServiceAccount token issued for a pod (the projected token every pod gets, or a TokenRequest with
a ``boundObjectRef``) carries the pod it was issued to in the review's ``user.extra``; since
Kubernetes 1.30 it also carries the node that pod is bound to. The agent's stream uses that: an
agent may only report the node its own pod runs on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

EXTRA_POD_NAME: Final = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID: Final = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME: Final = "authentication.kubernetes.io/node-name"
EXTRA_NODE_UID: Final = "authentication.kubernetes.io/node-uid"
EXTRA_CREDENTIAL_ID: Final = "authentication.kubernetes.io/credential-id"

_SA_PREFIX: Final = "system:serviceaccount:"


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller. ``extra`` holds the review's extra fields, one value list each."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_review(
        cls,
        *,
        username: str,
        uid: str = "",
        groups: Sequence[str] = (),
        extra: Mapping[str, Sequence[str]] | None = None,
    ) -> Identity:
        return cls(
            username=username,
            uid=uid,
            groups=tuple(groups),
            extra={key: tuple(values) for key, values in (extra or {}).items()},
        )

    def _one(self, key: str) -> str | None:
        values = self.extra.get(key, ())
        return values[0] if len(values) == 1 and values[0] else None

    @property
    def service_account(self) -> tuple[str, str] | None:
        """``(namespace, name)`` when the caller is a ServiceAccount."""
        if not self.username.startswith(_SA_PREFIX):
            return None
        namespace, sep, name = self.username[len(_SA_PREFIX) :].partition(":")
        if not sep or not namespace or not name or ":" in name:
            return None
        return namespace, name

    @property
    def pod_name(self) -> str | None:
        """The pod the token is bound to, if it is a pod-bound ServiceAccount token."""
        return self._one(EXTRA_POD_NAME)

    @property
    def pod_uid(self) -> str | None:
        return self._one(EXTRA_POD_UID)

    @property
    def node_name(self) -> str | None:
        """The node the token's pod was bound to when the token was issued."""
        return self._one(EXTRA_NODE_NAME)

    def describe(self) -> str:
        """A short, log-safe description (never the token)."""
        parts = [self.username]
        if self.pod_name:
            parts.append(f"pod={self.pod_name}")
        if self.node_name:
            parts.append(f"node={self.node_name}")
        return " ".join(parts)


ANONYMOUS_DEMO: Final = Identity(username="topos:auth-disabled")
"""The identity every request gets when authentication is switched off (embedded demo)."""
