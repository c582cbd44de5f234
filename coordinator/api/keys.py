"""Typed application state (``web.AppKey``) shared by the route modules."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from coordinator.api.metrics import Metrics
from coordinator.api.routing import Route
from coordinator.inventory.ingest import SessionRegistry
from coordinator.inventory.store import Inventory

AgentAuthenticator = Callable[[web.Request], Awaitable[str | None]]
"""Checks a stream request before the upgrade: returns the node the caller may report
(``None``: any node) or raises ``ApiError`` (401/403). Auth off: always ``None``."""


async def allow_any_node(request: web.Request) -> str | None:
    return None


@dataclass
class Readiness:
    """What ``/readyz`` waits for: each component sets its flag once it is serving."""

    checks: dict[str, bool] = field(default_factory=dict)
    #: Why a check is false, where its component knows (``/readyz`` shows it).
    reasons: dict[str, str] = field(default_factory=dict)
    _waiting: dict[str, asyncio.Event] = field(default_factory=dict, init=False, repr=False)

    def set(self, name: str, ready: bool, *, reason: str | None = None) -> None:
        self.checks[name] = ready
        if ready or reason is None:
            self.reasons.pop(name, None)
        else:
            self.reasons[name] = reason
        if ready and name in self._waiting:
            self._waiting[name].set()

    def reached(self, name: str) -> asyncio.Event:
        """An event set once ``name`` has been ready (at once if it is): what waits for it
        starts the moment it is, not at the next poll."""
        event = self._waiting.setdefault(name, asyncio.Event())
        if self.checks.get(name):
            event.set()
        return event

    @property
    def ready(self) -> bool:
        return all(self.checks.values())


DEFAULT_HELLO_TIMEOUT_S: Final = 10.0
DEFAULT_STREAM_IDLE_TIMEOUT_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class StreamTimeouts:
    """How long an agent stream may say nothing: ``hello_s`` from the upgrade to its ``hello``,
    ``idle_s`` between frames after it (agents send a heartbeat every 5 s). Past either, the
    stream is closed with ``timeout``."""

    hello_s: float = DEFAULT_HELLO_TIMEOUT_S
    idle_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.hello_s <= 0 or self.idle_s <= 0:
            raise ValueError("stream timeouts must be positive")


INVENTORY = web.AppKey("inventory", Inventory)
SESSIONS = web.AppKey("sessions", SessionRegistry)
METRICS = web.AppKey("metrics", Metrics)
READINESS = web.AppKey("readiness", Readiness)
STREAM_TIMEOUTS = web.AppKey("stream_timeouts", StreamTimeouts)
AGENT_AUTH = web.AppKey[AgentAuthenticator]("agent_auth")
ROUTES = web.AppKey[tuple[Route, ...]]("routes")
