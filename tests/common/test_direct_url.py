"""The URL ``DirectTransport`` hands aiohttp: parsed once for the server, the encoded path taken as
it is, and the same URL aiohttp would have parsed from the string — with a path prefix, an IPv6
server, a query to encode; a path that is not percent-encoded is left to aiohttp as a string."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import pytest
from yarl import URL

from common.kube.direct import DirectTransport
from common.kube.resources import PODS


def _parts(url: URL) -> tuple[object, ...]:
    """What the server is sent, decoded (yarl may leave ``(`` or ``,`` encoded or not)."""
    return (url.scheme, url.host, url.port, url.path, tuple(url.query.items()))


def _transport(host: str) -> DirectTransport:
    api: Any = SimpleNamespace(
        configuration=SimpleNamespace(host=host),
        rest_client=SimpleNamespace(),
        default_headers={},
    )
    return DirectTransport(api, session=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "host",
    [
        "https://127.0.0.1:6443",
        "https://kube.example:443/",
        "https://[::1]:6443",
        "https://rancher.example/k8s/clusters/c-m-abc",  # a proxy's path prefix
        "http://localhost:8080",
    ],
)
def test_the_parsed_url_is_the_one_aiohttp_would_parse(host: str) -> None:
    transport = _transport(host)
    path = PODS.path(namespace="perf-1", name="p-00001", subresource="binding")
    query = {"labelSelector": "app in (a,b),tier!=db", "limit": 500}
    url = transport.url(path, query)
    assert isinstance(url, URL)
    # what the string was before: parsed by aiohttp (yarl) on every request
    before = URL(f"{host.rstrip('/')}{path}?{urlencode(list(query.items()))}")
    assert _parts(url) == _parts(before)
    assert url.query["labelSelector"] == "app in (a,b),tier!=db"
    assert url.raw_path.endswith("/api/v1/namespaces/perf-1/pods/p-00001/binding")
    version = transport.url("/version", None)
    assert isinstance(version, URL)
    assert _parts(version) == _parts(URL(f"{host.rstrip('/')}/version"))


def test_a_path_not_encoded_and_a_changed_server_are_handled() -> None:
    transport = _transport("https://127.0.0.1:6443")
    assert transport.url("/api/v1/namespaces/a b/pods", None) == (
        "https://127.0.0.1:6443/api/v1/namespaces/a b/pods"  # aiohttp quotes it, as before
    )
    transport._configuration.host = "https://10.0.0.1:6443"  # e.g. a reloaded kubeconfig
    assert transport.url("/api", {"watch": "true"}) == URL("https://10.0.0.1:6443/api?watch=true")


def test_only_encoded_paths_go_on_the_lean_pool() -> None:
    transport = _transport("https://127.0.0.1:6443")
    assert transport.pool is None  # no aiohttp session here: nothing to stand beside
    assert not transport.exchanges("/api/v1/pods")
    transport.pool = object()  # type: ignore[assignment]
    assert transport.exchanges("/api/v1/namespaces/a/pods/b%20c/binding")
    assert not transport.exchanges("/api/v1/namespaces/a/pods/b c")  # the session encodes it
