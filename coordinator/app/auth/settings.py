"""Authentication settings: the config file's ``auth`` section (``coordinator.app.config``)."""

from __future__ import annotations

import msgspec

from common.labels import check_namespace_name, check_object_name
from coordinator.adapters.kube.identity import Identity


class AuthSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who may call the coordinator's HTTP API and stream."""

    enabled: bool = True
    """Off: every request is accepted without a token (the embedded demo); logged loudly."""
    open_read_only: bool = msgspec.field(default=False, name="openReadOnly")
    """Serve GET/HEAD endpoints (inventory, nodes, gangs, explain, domains, metrics) without a
    token. ``kubectl topos`` reaches the coordinator through the API server's service proxy, which
    authorises the user (RBAC on ``services/proxy``) and then strips the credentials, so the
    plugin needs this on."""
    agent_service_accounts: tuple[str, ...] = msgspec.field(
        default=("topos-system/topos-agent",), name="agentServiceAccounts"
    )
    """``namespace/name`` of ServiceAccounts whose pod-bound tokens may open the agent stream."""
    audiences: tuple[str, ...] = ()
    """Audiences a token must be issued for; empty = the API server's own (default SA tokens)."""
    cache_ttl_s: float = msgspec.field(default=10.0, name="cacheTTLSeconds")
    """How long an accepted token's review is reused."""
    negative_cache_ttl_s: float = msgspec.field(default=2.0, name="negativeCacheTTLSeconds")
    """How long a rejected token's review is reused."""
    cache_max_entries: int = msgspec.field(default=4096, name="cacheMaxEntries")
    """Most reviews remembered at once (least recently used are dropped first)."""
    max_token_bytes: int = msgspec.field(default=16 * 1024, name="maxTokenBytes")
    """Longer bearer tokens are refused without a review."""

    def __post_init__(self) -> None:
        for entry in self.agent_service_accounts:
            namespace, sep, name = entry.partition("/")
            if not sep or not namespace or not name or "/" in name:
                raise ValueError(f"agentServiceAccounts entry {entry!r}: expected namespace/name")
            check_namespace_name(f"agentServiceAccounts entry {entry!r}", namespace)
            check_object_name(f"agentServiceAccounts entry {entry!r}", name)
        if self.cache_ttl_s < 0 or self.negative_cache_ttl_s < 0:
            raise ValueError("auth cache TTLs must not be negative")
        if self.cache_max_entries < 1 or self.max_token_bytes < 1:
            raise ValueError("auth cacheMaxEntries and maxTokenBytes must be positive")

    def is_agent(self, identity: Identity) -> bool:
        account = identity.service_account
        return account is not None and f"{account[0]}/{account[1]}" in self.agent_service_accounts
