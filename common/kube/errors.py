"""The Kubernetes errors the rest of Topos sees, whatever client library sits underneath.

Every failure of an API call is a ``KubeError``; the subclass says what happened, the attributes
carry the API server's own words (``status``, ``reason``, ``message``) so callers can log them.
The client library's exception stays reachable as ``__cause__``.
"""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP status (0 when no response came back)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        details: dict[str, Any] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.details: dict[str, Any] = details or {}
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        prefix = f"{self.status} {self.reason}".strip() if self.status else self.reason
        return f"{prefix}: {self.message}" if prefix else self.message


class Unreachable(KubeError):
    """No HTTP response: connection refused or reset, TLS failure, timeout."""


class BadRequest(KubeError):
    """400: the request itself is malformed (e.g. a patch that doesn't parse)."""


class Unauthorized(KubeError):
    """401: the credentials were not accepted."""


class Forbidden(KubeError):
    """403: authenticated, but RBAC (or an admission plugin) refuses the verb."""


class NotFound(KubeError):
    """404: the object (or its namespace, or the resource type) does not exist."""


class Conflict(KubeError):
    """409: a write lost a race (stale resourceVersion); re-read and try again."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create found an object of that name."""


class Gone(KubeError):
    """410: the resourceVersion asked for is too old (watch or list); re-list from scratch."""


class Invalid(KubeError):
    """422: the object fails validation; ``details['causes']`` names the fields."""


class TooManyRequests(KubeError):
    """429: throttled (API priority and fairness, or an eviction blocked by a disruption budget)."""


class ServerError(KubeError):
    """5xx: the API server (or etcd behind it) failed."""


class Superseded(KubeError):
    """Not sent: a deferrable request was called off before it left (``Deferrable.send_now``
    said no), e.g. a pod's unschedulable explanation once its bind was sent."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_for_status(
    status: int, body: dict[str, Any] | None, *, retry_after_s: float | None = None
) -> KubeError:
    """Build the error for an HTTP status and the API server's ``Status`` object (if any)."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or f"HTTP {status}")
    details = body.get("details")
    cls: type[KubeError]
    if status == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, KubeError)
    return cls(
        message,
        status=status,
        reason=reason,
        details=details if isinstance(details, dict) else None,
        retry_after_s=retry_after_s,
    )
