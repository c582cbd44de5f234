"""Content negotiation: JSON by default, MessagePack on ``Accept: application/msgpack``."""

from __future__ import annotations

from typing import Final

import msgspec
from aiohttp import web

MSGPACK: Final = "application/msgpack"
_MSGPACK_TYPES: Final = (MSGPACK, "application/x-msgpack", "application/vnd.msgpack")
_JSON: Final = msgspec.json.Encoder()
_MSGPACK_ENC: Final = msgspec.msgpack.Encoder()


def wants_msgpack(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    for part in accept.split(","):
        media, _, params = part.strip().partition(";")
        if media.strip().lower() in _MSGPACK_TYPES:
            return "q=0" not in params.replace(" ", "").split(";")
    return False


def respond(request: web.Request, data: object, *, status: int = 200) -> web.Response:
    """Encode ``data`` (msgspec Structs, dicts, lists, scalars) in the negotiated format."""
    if wants_msgpack(request):
        return web.Response(body=_MSGPACK_ENC.encode(data), status=status, content_type=MSGPACK)
    return web.Response(
        body=_JSON.encode(data), status=status, content_type="application/json", charset="utf-8"
    )
