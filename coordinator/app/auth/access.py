"""Which requests need which credentials: a fixed classification of the API's routes."""

from __future__ import annotations

import enum
from typing import Final

from coordinator.api.ui import UI_PATH  # the topology view's files: no data; the page sends a token

PUBLIC_PATHS: Final = frozenset({"/healthz", "/readyz"})
AGENT_STREAM_PATH: Final = "/v1/agents/stream"
_READ_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


class Access(enum.Enum):
    PUBLIC = "public"
    """Liveness/readiness: the kubelet's probes carry no token; the topology view's files."""
    READ = "read"
    """Reads that change nothing (inventory, nodes, gangs, explain, domains, metrics, OpenAPI)."""
    WRITE = "write"
    """Anything else, e.g. ``POST /v1/simulate``."""
    AGENT = "agent"
    """The agents' capacity stream: only agent ServiceAccounts, each for its own node."""


def _is_ui_file(path: str) -> bool:
    """``/ui``, ``/ui/`` or one file name below it: never a path that climbs out (``..``)."""
    if path == UI_PATH:
        return True
    name = path.removeprefix(UI_PATH + "/")
    return name != path and "/" not in name and ".." not in name


def classify(method: str, path: str) -> Access:
    if path in PUBLIC_PATHS:
        return Access.PUBLIC
    if method.upper() in _READ_METHODS and _is_ui_file(path):
        return Access.PUBLIC
    if path == AGENT_STREAM_PATH or path.startswith(AGENT_STREAM_PATH + "/"):
        return Access.AGENT
    if method.upper() in _READ_METHODS:
        return Access.READ
    return Access.WRITE
