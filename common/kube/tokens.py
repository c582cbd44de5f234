"""ServiceAccount tokens: who holds one (TokenReview), and a new one (TokenRequest)."""

from __future__ import annotations

from typing import Any

from common.kube.resources import SERVICE_ACCOUNTS, TOKEN_REVIEWS
from common.kube.types import KubeObject, TokenReviewResult
from common.kube.verbs import GenericVerbs


class TokenVerbs(GenericVerbs):
    async def review_token(
        self, token: str, *, audiences: list[str] | None = None
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
        audiences: list[str] | None = None,
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
