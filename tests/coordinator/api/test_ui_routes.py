"""``/ui``: the topology view's files as a browser receives them — the right media types, every
file the page refers to served, nothing else of the package (or of the disk) reachable, and the
page open without a token when the API itself needs one. (tests/ui loads it in a real browser.)"""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from yarl import URL

from coordinator.adapters.kube.tokenreview import Review, ReviewUnavailable
from coordinator.api import pending, ui
from coordinator.app.auth.middleware import install
from coordinator.app.auth.settings import AuthSettings
from coordinator.app.web import build_app
from coordinator.inventory.store import Inventory


@pytest.fixture
async def client(aiohttp_client: Any) -> TestClient:
    app = build_app(Inventory(), extra_routes=(*pending.ROUTES, *ui.ROUTES))
    return await aiohttp_client(app)


async def test_ui_redirects_to_the_page_which_is_html_with_a_strict_policy(
    client: TestClient,
) -> None:
    resp = await client.get("/ui", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"] == "ui/"
    page = await client.get("/ui")  # followed, as a browser does
    assert page.status == 200
    assert page.url.path == "/ui/"
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy  # the page talks to this coordinator only
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "<title>Topos · cluster topology</title>" in await page.text()


async def test_every_file_the_page_refers_to_is_served_with_its_type(client: TestClient) -> None:
    html = await (await client.get("/ui/")).text()
    wanted = set(re.findall(r'(?:src|href)="([\w.-]+\.(?:js|css))"', html))
    assert wanted == {"main.js", "topology.css"}
    types = {".js": "text/javascript", ".css": "text/css"}
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        seen.add(name)
        resp = await client.get(f"/ui/{name}")
        assert resp.status == 200, name
        assert resp.content_type == types[name[name.rindex(".") :]], name
        if name.endswith(".js"):  # modules import their neighbours: "./dom.js"
            imports = re.findall(r'from "\./([\w.-]+\.js)"', await resp.text())
            wanted |= set(imports) - seen
    assert {"api.js", "dom.js", "nodes.js", "queue.js"} <= seen
    assert "innerHTML" not in "".join([(await (await client.get(f"/ui/{n}")).text()) for n in seen])


@pytest.mark.parametrize(
    "path",
    [
        "/ui/nope.js",
        "/ui/__init__.py",  # in the package folder, but not a page file
        "/ui/..%2F..%2Fpyproject.toml",
        "/ui/%2e%2e%2f__init__.py",
        "/ui/sub/main.js",
        "/ui/..%5C__init__.py",
    ],
)
async def test_nothing_but_the_page_files_is_served(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 404, path
    body = await resp.json()
    assert body["error"] == "not-found"


async def test_openapi_lists_the_page_and_the_pending_route(client: TestClient) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    assert doc["paths"]["/ui/"]["get"]["tags"] == ["ui"]
    pending_op = doc["paths"]["/v1/pending"]["get"]
    assert {p["name"] for p in pending_op["parameters"]} == {"namespace", "limit"}
    ref = pending_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/PendingList")


class _RefuseAll:
    """A TokenReview that accepts no token (none is sent here anyway)."""

    async def review(self, token: str) -> Review:
        raise ReviewUnavailable("no API server in this test")


async def test_with_authentication_on_the_page_loads_and_the_api_asks_for_a_token(
    aiohttp_client: Any,
) -> None:
    app = build_app(Inventory(), extra_routes=ui.ROUTES)
    install(app, settings=AuthSettings(enabled=True), reviewer=_RefuseAll())
    client = await aiohttp_client(app)
    for path in ("/ui/", "/ui/main.js", "/ui/topology.css"):
        assert (await client.get(path)).status == 200, path
    assert (await client.get("/ui/missing.js")).status == 404
    api = await client.get("/v1/inventory")
    assert api.status == 401  # the page shows its token form on this answer
    assert api.headers["WWW-Authenticate"] == 'Bearer realm="topos"'
    assert (await client.post("/ui/")).status == 401  # only reads of the page are open
    for climbing in ("/ui/../v1/inventory", "/ui/x/../../v1/inventory", "/ui/%2e%2e/v1/inventory"):
        resp = await client.get(URL(climbing, encoded=True))
        assert resp.status in (401, 404), climbing  # never the inventory without a token
