"""May this caller report this node? The agent stream's check (docs/design.md §3).

An agent authenticates with its pod's ServiceAccount token. The TokenReview of such a token names
the pod and (Kubernetes ≥ 1.30) the node the pod is bound to. The agent may report exactly that
node. Where the review carries only the pod, a :class:`PodNodeResolver` (on the API server:
:class:`~coordinator.adapters.kube.podnode.KubePodNodeResolver`) reads the pod's
``spec.nodeName``, checking the pod's UID, so the token of a deleted pod does not speak for a new
pod of the same name.

Verdicts are values: :class:`NodeVerdict` says allowed or not, and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from coordinator.adapters.kube.identity import Identity
from coordinator.app.auth.settings import AuthSettings


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    allowed: bool
    reason: str = ""
    node: str | None = None
    """The node the caller may report; ``None`` with ``allowed`` means any (auth off)."""


class PodNodeResolver(Protocol):
    async def node_of(self, namespace: str, pod: str, uid: str | None) -> str | None:
        """The node pod ``namespace/pod`` (with that UID, when given) is bound to, or None."""
        ...


class NodeGuard:
    """Decides which node an identity may report."""

    def __init__(self, settings: AuthSettings, *, resolver: PodNodeResolver | None = None) -> None:
        self._settings = settings
        self._resolver = resolver

    async def node_for(self, identity: Identity | None) -> NodeVerdict:
        """The one node ``identity`` may report, or why it may report none."""
        if not self._settings.enabled:
            return NodeVerdict(True)
        if identity is None:
            return NodeVerdict(False, "not authenticated")
        if not self._settings.is_agent(identity):
            return NodeVerdict(False, f"{identity.username} is not a Topos agent ServiceAccount")
        bound = identity.node_name
        if bound is None and identity.pod_name and self._resolver is not None:
            account = identity.service_account
            assert account is not None  # is_agent() implies a ServiceAccount
            bound = await self._resolver.node_of(account[0], identity.pod_name, identity.pod_uid)
        if bound is None:
            return NodeVerdict(
                False,
                "token is not bound to a pod on a node; agents must use their pod's "
                "ServiceAccount token",
            )
        return NodeVerdict(True, node=bound)

    async def check(self, identity: Identity | None, node: str) -> NodeVerdict:
        """May ``identity`` report ``node``?"""
        verdict = await self.node_for(identity)
        if verdict.allowed and verdict.node is not None and verdict.node != node:
            return NodeVerdict(
                False, f"agent of node {verdict.node} may not report node {node}", verdict.node
            )
        return verdict
