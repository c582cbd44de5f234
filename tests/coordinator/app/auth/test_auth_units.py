"""Authentication pieces that need no API server: reading a TokenReview's verdict, the verdict
cache (expiry on an injected clock, merging concurrent reviews, bounded size), route classes, the
settings operators write, and the node an agent identity may report.

The reviewer used here is a scripted implementation of our own ``TokenReviewer`` seam; everything
that talks to Kubernetes is tested against the real API server in test_auth_kube.py.
"""

from __future__ import annotations

import asyncio

import pytest

from coordinator.adapters.kube.identity import Identity
from coordinator.adapters.kube.tokenreview import (
    CachingReviewer,
    Review,
    ReviewUnavailable,
    review_from_result,
)
from coordinator.app.auth.access import Access, classify
from coordinator.app.auth.agents import NodeGuard
from coordinator.app.auth.settings import AuthSettings
from coordinator.app.config.load import ConfigError, parse_config
from tests.support.clock import ManualClock


class ScriptedReviewer:
    """Accepts tokens starting with ``good-``; counts the reviews it was asked for."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def review(self, token: str) -> Review:
        self.calls.append(token)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ReviewUnavailable("api server down")
        if token.startswith("good-"):
            return Review(Identity(username=f"user:{token}"))
        return Review(None, "invalid token")


AGENT_STATUS = {
    "authenticated": True,
    "username": "system:serviceaccount:topos-system:topos-agent",
    "uid": "u-1",
    "groups": ["system:serviceaccounts", "system:authenticated"],
    "extra": {
        "authentication.kubernetes.io/pod-name": ["topos-agent-x1"],
        "authentication.kubernetes.io/pod-uid": ["p-1"],
        "authentication.kubernetes.io/node-name": ["gpu-node-1"],
    },
    "audiences": ["https://kubernetes.default.svc"],
    "error": "",
}


def test_review_status_of_a_pod_bound_agent_token() -> None:
    review = review_from_result(AGENT_STATUS)
    assert review.identity is not None
    ident = review.identity
    assert ident.service_account == ("topos-system", "topos-agent")
    assert (ident.pod_name, ident.pod_uid, ident.node_name) == (
        "topos-agent-x1",
        "p-1",
        "gpu-node-1",
    )
    assert "gpu-node-1" in ident.describe()


@pytest.mark.parametrize(
    "status",
    [
        {"authenticated": False, "error": "token expired"},
        {"authenticated": True},  # no user
        {"authenticated": True, "username": 7},
        {"authenticated": True, "username": ""},
        "garbage",
        None,
        {"authenticated": "yes", "username": "a"},
    ],
)
def test_anything_but_a_clear_yes_is_a_no(status: object) -> None:
    assert not review_from_result(status).authenticated


def test_audience_must_match_when_asked_for() -> None:
    assert not review_from_result(AGENT_STATUS, audiences=["topos"]).authenticated
    assert review_from_result(AGENT_STATUS, audiences=["https://kubernetes.default.svc"]).identity


def test_user_names_that_are_not_service_accounts() -> None:
    assert Identity(username="kubernetes-admin").service_account is None
    assert Identity(username="system:serviceaccount:ns").service_account is None
    assert Identity(username="system:serviceaccount:ns:a:b").service_account is None
    # two pod names (never issued, but extra is a list) is not "bound to one pod"
    assert (
        Identity(username="x", extra={"authentication.kubernetes.io/pod-name": ("a", "b")}).pod_name
        is None
    )


async def test_cache_reuses_a_verdict_until_it_expires() -> None:
    inner, clock = ScriptedReviewer(), ManualClock()
    cache = CachingReviewer(inner, ttl_s=10, negative_ttl_s=2, clock=clock)
    assert (await cache.review("good-a")).authenticated
    clock.now += 9.9
    assert (await cache.review("good-a")).authenticated
    assert inner.calls == ["good-a"]
    clock.now += 0.2
    await cache.review("good-a")
    assert inner.calls == ["good-a", "good-a"]
    assert (cache.stats.hits, cache.stats.reviews) == (1, 2)


async def test_rejections_are_cached_for_less_time_and_failures_not_at_all() -> None:
    inner, clock = ScriptedReviewer(), ManualClock()
    cache = CachingReviewer(inner, ttl_s=10, negative_ttl_s=2, clock=clock)
    assert not (await cache.review("bad")).authenticated
    clock.now += 1
    await cache.review("bad")
    assert len(inner.calls) == 1
    clock.now += 1.5
    await cache.review("bad")
    assert len(inner.calls) == 2
    inner.fail = True
    for _ in range(2):
        with pytest.raises(ReviewUnavailable):
            await cache.review("good-b")
    assert inner.calls[-2:] == ["good-b", "good-b"]


async def test_concurrent_requests_with_one_token_cost_one_review() -> None:
    inner = ScriptedReviewer()
    inner.gate = asyncio.Event()
    cache = CachingReviewer(inner, clock=ManualClock())
    tasks = [asyncio.create_task(cache.review("good-c")) for _ in range(20)]
    await asyncio.sleep(0)
    inner.gate.set()
    results = await asyncio.gather(*tasks)
    assert all(r.authenticated for r in results)
    assert inner.calls == ["good-c"]


async def test_concurrent_waiters_share_a_failure() -> None:
    inner = ScriptedReviewer()
    inner.gate, inner.fail = asyncio.Event(), True
    cache = CachingReviewer(inner, clock=ManualClock())
    tasks = [asyncio.create_task(cache.review("good-d")) for _ in range(3)]
    await asyncio.sleep(0)
    inner.gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(o, ReviewUnavailable) for o in outcomes)
    assert len(inner.calls) == 1


async def test_cache_is_bounded_and_never_keeps_the_token() -> None:
    inner = ScriptedReviewer()
    cache = CachingReviewer(inner, max_entries=3, clock=ManualClock())
    for i in range(10):
        await cache.review(f"good-{i}")
    assert len(cache) == 3
    assert not any("good" in repr(k) for k in cache._entries)
    await cache.review("good-0")  # evicted long ago: reviewed again
    assert inner.calls.count("good-0") == 2


@pytest.mark.parametrize(
    ("method", "path", "access"),
    [
        ("GET", "/healthz", Access.PUBLIC),
        ("GET", "/readyz", Access.PUBLIC),
        ("GET", "/v1/nodes", Access.READ),
        ("GET", "/metrics", Access.READ),
        ("HEAD", "/v1/gangs/ns/g", Access.READ),
        ("POST", "/v1/simulate", Access.WRITE),
        ("DELETE", "/v1/nodes/x", Access.WRITE),
        ("GET", "/v1/agents/stream", Access.AGENT),
        ("POST", "/healthz/../v1/simulate", Access.WRITE),
    ],
)
def test_route_classes(method: str, path: str, access: Access) -> None:
    assert classify(method, path) is access


def test_settings_from_configmap_and_their_errors() -> None:
    def auth(raw: dict[str, object]) -> AuthSettings | None:
        return parse_config({"auth": raw}, source="F").auth

    s = auth({"openReadOnly": True, "agentServiceAccounts": ["gpu/agent"], "cacheTTLSeconds": 5})
    assert s is not None
    assert s.open_read_only
    assert s.agent_service_accounts == ("gpu/agent",)
    assert s.cache_ttl_s == 5
    with pytest.raises(
        ConfigError, match=r"unknown key 'auth\.open' in F \(expected one of: .*openReadOnly"
    ):
        auth({"open": True})
    with pytest.raises(ConfigError, match=r"'auth' in F: .* expected namespace/name"):
        auth({"agentServiceAccounts": ["agent"]})
    with pytest.raises(ConfigError, match=r"'auth\.enabled' in F: expected true or false, got a"):
        auth({"enabled": "false"})
    with pytest.raises(ConfigError, match=r"'auth\.cacheMaxEntries' in F: expected an integer"):
        auth({"cacheMaxEntries": True})


class Pods:
    def __init__(self, where: dict[tuple[str, str, str | None], str]) -> None:
        self.where = where

    async def node_of(self, namespace: str, pod: str, uid: str | None) -> str | None:
        return self.where.get((namespace, pod, uid))


async def test_an_agent_may_report_only_its_own_node() -> None:
    guard = NodeGuard(AuthSettings())
    agent = review_from_result(AGENT_STATUS).identity
    assert (await guard.check(agent, "gpu-node-1")).allowed
    refused = await guard.check(agent, "gpu-node-2")
    assert not refused.allowed
    assert refused.reason == "agent of node gpu-node-1 may not report node gpu-node-2"
    stranger = Identity(username="system:serviceaccount:default:default")
    assert "not a Topos agent" in (await guard.check(stranger, "gpu-node-1")).reason
    unbound = Identity(username="system:serviceaccount:topos-system:topos-agent")
    assert "not bound to a pod" in (await guard.check(unbound, "gpu-node-1")).reason


async def test_without_node_extra_the_pod_is_looked_up_by_name_and_uid() -> None:
    extra = {
        "authentication.kubernetes.io/pod-name": ("agent-7",),
        "authentication.kubernetes.io/pod-uid": ("uid-7",),
    }
    ident = Identity(username="system:serviceaccount:topos-system:topos-agent", extra=extra)
    pods = Pods({("topos-system", "agent-7", "uid-7"): "n7"})
    guard = NodeGuard(AuthSettings(), resolver=pods)
    assert (await guard.check(ident, "n7")).allowed
    assert not (await guard.check(ident, "n8")).allowed
    pods.where.clear()  # the pod is gone (or re-created with another uid)
    assert not (await guard.check(ident, "n7")).allowed


async def test_auth_off_allows_any_node() -> None:
    guard = NodeGuard(AuthSettings(enabled=False))
    verdict = await guard.check(None, "anything")
    assert verdict.allowed
    assert verdict.node is None
