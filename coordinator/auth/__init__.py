"""Authentication of the coordinator's HTTP API and agent stream (DESIGN.md §3, §5).

Bearer tokens are verified by the API server's TokenReview (:mod:`.review`, cached briefly), the
caller's identity decides what it may do (:mod:`.access`, :mod:`.agents`), and an aiohttp
middleware applies it (:mod:`.middleware`). ``AuthSettings(enabled=False)`` is the embedded demo's
mode and says so in the log.
"""

from coordinator.auth.access import Access, classify
from coordinator.auth.agents import NodeGuard, NodeVerdict, PodNodeResolver
from coordinator.auth.identity import Identity
from coordinator.auth.middleware import (
    IDENTITY_KEY,
    agent_node,
    auth_middleware,
    authorize_node_report,
    identity_of,
    install,
)
from coordinator.auth.review import (
    CachingReviewer,
    KubeTokenReviewer,
    Review,
    ReviewUnavailable,
    TokenReviewer,
    review_from_result,
)
from coordinator.auth.settings import AuthSettings

__all__ = [
    "IDENTITY_KEY",
    "Access",
    "AuthSettings",
    "CachingReviewer",
    "Identity",
    "KubeTokenReviewer",
    "NodeGuard",
    "NodeVerdict",
    "PodNodeResolver",
    "Review",
    "ReviewUnavailable",
    "TokenReviewer",
    "agent_node",
    "auth_middleware",
    "authorize_node_report",
    "classify",
    "identity_of",
    "install",
    "review_from_result",
]
