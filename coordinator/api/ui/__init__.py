"""``GET /ui/``: the topology view, a read-only web page over this API.

The page is plain HTML, CSS and JavaScript modules shipped in this package (no build step, nothing
fetched from elsewhere); in the browser it reads ``/v1/inventory``, ``/v1/domains``,
``/v1/pending``, ``/v1/gangs`` and ``/v1/pods/{namespace}/{name}/explain`` every few seconds.

The files hold no cluster data, so they are served without authentication
(``coordinator.app.auth.access``); where the API needs a bearer token the page asks for one,
keeps it in the tab's ``sessionStorage`` and sends it with every API call. Only the files of this
folder are served, looked up by exact name: anything else is a 404.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Final

from aiohttp import web

from coordinator.api.errors import not_found
from coordinator.api.routing import Route

__all__ = ["ROUTES", "UI_PATH", "static_files"]

UI_PATH: Final = "/ui"
INDEX: Final = "index.html"
_TYPES: Final = {
    ".html": "text/html",
    ".css": "text/css",
    ".js": "text/javascript",
}
# The page loads only its own files and talks only to this coordinator; nothing inline.
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.cache
def static_files() -> dict[str, tuple[bytes, str]]:
    """File name → (content, media type), for every page file shipped in this package."""
    out: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files(__name__).iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            out[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return out


def _serve(name: str) -> web.Response:
    found = static_files().get(name)
    if found is None:
        raise not_found(f"page file {name[:100]!r}")
    body, media = found
    return web.Response(body=body, content_type=media, charset="utf-8", headers=_HEADERS)


async def ui_redirect(request: web.Request) -> web.Response:
    # Relative, so the page's relative links also work behind a proxy that adds a path prefix.
    raise web.HTTPFound("ui/")


async def ui_index(request: web.Request) -> web.Response:
    return _serve(INDEX)


async def ui_file(request: web.Request) -> web.Response:
    return _serve(request.match_info["file"])


ROUTES = (
    Route("GET", UI_PATH, ui_redirect, "Redirects to /ui/", "ui", response_type="text/html"),
    Route(
        "GET",
        UI_PATH + "/",
        ui_index,
        "The topology view: a read-only web page over this API (no token needed to load it)",
        "ui",
        response_type="text/html",
    ),
    Route(
        "GET",
        UI_PATH + "/{file}",
        ui_file,
        "One of the page's own files (its scripts and style sheet)",
        "ui",
        response_type="text/javascript",
        errors={404: "no such page file"},
    ),
)
