"""The client adapter's pure parts: status → error mapping, the retry policy, watch-line decoding
and API paths. (Behaviour against the real API server is in test_kube_smoke.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from common.kube import (
    NODES,
    PODS,
    AlreadyExists,
    Conflict,
    Gone,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    RetryPolicy,
    ServerError,
    TooManyRequests,
    Unreachable,
)
from common.kube.errors import error_for_status
from common.kube.watch import parse_watch_line


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (418, "", KubeError),
    ],
)
def test_status_maps_to_error_class(status: int, reason: str, expected: type[KubeError]) -> None:
    error = error_for_status(status, {"reason": reason, "message": "the server says no"})
    assert type(error) is expected
    assert error.status == status
    assert "the server says no" in str(error)


def test_already_exists_is_a_conflict() -> None:
    # callers that only care about "someone else wrote first" can catch Conflict
    assert isinstance(error_for_status(409, {"reason": "AlreadyExists"}), Conflict)


def test_error_without_status_body_still_has_a_message() -> None:
    error = error_for_status(502, None)
    assert isinstance(error, ServerError)
    assert "502" in str(error)


def test_retry_policy_retries_only_what_is_safe() -> None:
    policy = RetryPolicy(attempts=3)
    unavailable = error_for_status(503, {})
    internal = error_for_status(500, {})
    lost = Unreachable("connection reset")
    not_found = error_for_status(404, {})
    # 503/429: the server did not process it, any verb may retry
    assert policy.should_retry("POST", unavailable, attempt=1)
    # ambiguous failures: only verbs that are safe to repeat
    assert policy.should_retry("GET", internal, attempt=1)
    assert policy.should_retry("PUT", lost, attempt=1)
    assert not policy.should_retry("POST", internal, attempt=1)
    assert not policy.should_retry("PATCH", lost, attempt=1)
    # answers are final
    assert not policy.should_retry("GET", not_found, attempt=1)
    # and attempts are bounded
    assert not policy.should_retry("GET", internal, attempt=3)


def test_retry_delay_grows_caps_and_honours_retry_after() -> None:
    policy = RetryPolicy(initial_delay_s=0.1, max_delay_s=1.0)
    error = error_for_status(500, {})
    delays = [policy.delay_s(error, attempt, jitter=1.0) for attempt in (1, 2, 3, 4, 5, 6)]
    assert delays == sorted(delays)
    assert delays[0] == pytest.approx(0.1)
    assert delays[-1] == pytest.approx(1.0)
    throttled = error_for_status(429, {}, retry_after_s=0.5)
    assert policy.delay_s(throttled, 1, jitter=0.0) == 0.5
    assert policy.delay_s(error_for_status(429, {}, retry_after_s=60), 1) == 1.0


def test_watch_line_decodes_event() -> None:
    kind, obj = parse_watch_line(
        b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p"}}}\n', PODS
    )
    assert kind == "MODIFIED"
    assert obj["metadata"]["name"] == "p"


def test_watch_error_event_410_is_gone() -> None:
    line = (
        b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",'
        b'"message":"too old resource version: 1 (400)"}}'
    )
    with pytest.raises(Gone, match="too old"):
        parse_watch_line(line, PODS)


@pytest.mark.parametrize(
    "line",
    [b"not json at all", b"[1,2]", b'{"type":"ADDED"}', b'{"type":"EXPLODED","object":{}}'],
)
def test_watch_garbage_is_a_clear_error(line: bytes) -> None:
    with pytest.raises(KubeError, match="watch pods"):
        parse_watch_line(line, PODS)


def test_paths() -> None:
    assert NODES.path(name="gpu-1") == "/api/v1/nodes/gpu-1"
    assert PODS.path(namespace="ns", name="p", subresource="binding") == (
        "/api/v1/namespaces/ns/pods/p/binding"
    )
    assert PODS.path() == "/api/v1/pods"


@pytest.mark.parametrize("name", ["", "a/b", "..", "."])
def test_paths_refuse_names_that_would_escape(name: str) -> None:
    with pytest.raises(ValueError, match="invalid name"):
        PODS.path(namespace="ns", name=name)


def test_cluster_scoped_resource_refuses_a_namespace() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        NODES.path(namespace="ns", name="n")


async def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="does not exist"):
        await KubeClient.connect(tmp_path / "missing-kubeconfig")


async def test_malformed_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("clusters: [this is: not a kubeconfig\n")
    with pytest.raises(KubeError, match="cannot load Kubernetes configuration"):
        await KubeClient.connect(path)
