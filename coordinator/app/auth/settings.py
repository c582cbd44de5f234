"""Authentication settings (ConfigMap section ``auth``), grouped and documented in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.app.auth.identity import Identity


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthSettings:
    """Who may call the coordinator's HTTP API and stream."""

    enabled: bool = True
    """Off: every request is accepted without a token (the embedded demo); logged loudly."""
    open_read_only: bool = False
    """Serve GET/HEAD endpoints (inventory, nodes, gangs, explain, domains, metrics) without a
    token. ``kubectl topos`` reaches the coordinator through the API server's service proxy, which
    authorises the user (RBAC on ``services/proxy``) and then strips the credentials, so the
    plugin needs this on."""
    agent_service_accounts: tuple[str, ...] = ("topos-system/topos-agent",)
    """``namespace/name`` of ServiceAccounts whose pod-bound tokens may open the agent stream."""
    audiences: tuple[str, ...] = ()
    """Audiences a token must be issued for; empty = the API server's own (default SA tokens)."""
    cache_ttl_s: float = 10.0
    """How long an accepted token's review is reused."""
    negative_cache_ttl_s: float = 2.0
    """How long a rejected token's review is reused."""
    cache_max_entries: int = 4096
    """Most reviews remembered at once (least recently used are dropped first)."""
    max_token_bytes: int = 16 * 1024
    """Longer bearer tokens are refused without a review."""

    def __post_init__(self) -> None:
        for entry in self.agent_service_accounts:
            namespace, sep, name = entry.partition("/")
            if not sep or not namespace or not name or "/" in name:
                raise ValueError(f"agentServiceAccounts entry {entry!r}: expected namespace/name")
        if self.cache_ttl_s < 0 or self.negative_cache_ttl_s < 0:
            raise ValueError("auth cache TTLs must not be negative")
        if self.cache_max_entries < 1 or self.max_token_bytes < 1:
            raise ValueError("auth cacheMaxEntries and maxTokenBytes must be positive")

    def is_agent(self, identity: Identity) -> bool:
        account = identity.service_account
        return account is not None and f"{account[0]}/{account[1]}" in self.agent_service_accounts

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> AuthSettings:
        """Settings from the ConfigMap's camelCase ``auth`` section; unknown keys are an error."""
        names: dict[str, tuple[str, type | tuple[type, ...]]] = {
            "enabled": ("enabled", bool),
            "openReadOnly": ("open_read_only", bool),
            "agentServiceAccounts": ("agent_service_accounts", list),
            "audiences": ("audiences", list),
            "cacheTTLSeconds": ("cache_ttl_s", (int, float)),
            "negativeCacheTTLSeconds": ("negative_cache_ttl_s", (int, float)),
            "cacheMaxEntries": ("cache_max_entries", int),
            "maxTokenBytes": ("max_token_bytes", int),
        }
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise ValueError(f"unknown auth setting(s): {', '.join(unknown)}")
        kwargs: dict[str, Any] = {}
        for key, value in raw.items():
            attr, kind = names[key]
            bad_bool = isinstance(value, bool) and kind is not bool
            if bad_bool or not isinstance(value, kind):
                raise ValueError(f"auth.{key}: unexpected value {value!r}")
            if isinstance(value, list):
                if not all(isinstance(v, str) for v in value):
                    raise ValueError(f"auth.{key}: expected a list of strings")
                value = tuple(value)
            kwargs[attr] = value
        return cls(**kwargs)
