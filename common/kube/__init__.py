"""The one Kubernetes client adapter: nothing else in Topos imports kubernetes_asyncio.

- ``KubeClient`` (``client``): async verbs returning plain JSON dicts; built on ``core`` (one
  request, retries) and ``verbs`` (any resource), with ``pods``, ``events``, ``leases``, ``tokens``.
- ``Resource`` and constants (``resources``): which API types, at which paths.
- errors (``errors``): ``KubeError`` and one subclass per failure worth telling apart.
- ``RetryPolicy`` (``retry``): the one place retries are decided.
"""

# First: keeps kubernetes_asyncio from importing every generated API and model (see lean.py).
from common.kube import lean as _lean  # noqa: F401
from common.kube.client import KubeClient
from common.kube.core import ClientSettings, Deferrable
from common.kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
    Superseded,
    TooManyRequests,
    Unauthorized,
    Unreachable,
)
from common.kube.events import object_reference
from common.kube.ratelimit import RateLimit, TokenBucket
from common.kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    COMPUTE_DOMAINS,
    CONFIG_MAPS,
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
    TOKEN_REVIEWS,
    Resource,
)
from common.kube.retry import NO_RETRY, RetryPolicy
from common.kube.types import KubeObject, ObjectList, PatchType, WatchEventType

__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "COMPUTE_DOMAINS",
    "CONFIG_MAPS",
    "DEVICE_CLASSES",
    "DEVICE_TAINT_RULES",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "NO_RETRY",
    "PODS",
    "POD_GROUPS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "SERVICE_ACCOUNTS",
    "TOKEN_REVIEWS",
    "AlreadyExists",
    "BadRequest",
    "ClientSettings",
    "Conflict",
    "Deferrable",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeClient",
    "KubeError",
    "KubeObject",
    "NotFound",
    "ObjectList",
    "PatchType",
    "RateLimit",
    "Resource",
    "RetryPolicy",
    "ServerError",
    "Superseded",
    "TokenBucket",
    "TooManyRequests",
    "Unauthorized",
    "Unreachable",
    "WatchEventType",
    "object_reference",
]
