"""API errors: a JSON (or msgpack) body ``{"error": code, "message": …}`` with the right status.

Handlers raise :class:`ApiError`; the middleware renders it. aiohttp's own HTTP exceptions (404 for
an unknown path, 405 for a wrong method, 413 for a huge body) are rendered the same way, keeping
their headers (a 405 lists the route's methods in ``Allow``). A client that hangs up mid-request
is logged at DEBUG; any other exception becomes a 500 ``internal`` whose details stay in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from coordinator.api.render import respond

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_CODES = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "invalid",
    429: "too-many-requests",
    503: "unavailable",
}


_BODY_HEADERS = frozenset({"content-type", "content-length", "content-encoding"})
"""Headers of aiohttp's own error that describe its plain-text body, which ours replaces."""


_INTERNAL = "internal error; see the coordinator log"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def not_found(what: str) -> ApiError:
    return ApiError(404, "not-found", f"{what} not found")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad-request", message)


def error_response(request: web.Request, status: int, code: str, message: str) -> web.Response:
    return respond(request, {"error": code, "message": message}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(request, exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "error")
        response = error_response(request, exc.status, code, exc.reason)
        for name, value in exc.headers.items():
            if name.lower() not in _BODY_HEADERS:  # e.g. a 405's Allow
                response.headers.add(name, value)
        return response
    except web.RequestPayloadError as exc:  # a body that cannot be decoded (bad gzip, chunks)
        log.debug(
            "bad body from %s on %s %s: %s", request.remote, request.method, request.path, exc
        )
        return error_response(request, 400, "bad-request", f"malformed request body: {exc}")
    except ConnectionResetError:
        transport = request.transport
        if transport is not None and not transport.is_closing():
            log.exception("unhandled error serving %s %s", request.method, request.path)
            return error_response(request, 500, "internal", _INTERNAL)
        # The client hung up mid-request (e.g. a body shorter than its Content-Length, or a TLS
        # close_notify before its answer, which leaves the transport closing): its mistake, and
        # nobody is left to read an answer.
        log.debug("client %s left during %s %s", request.remote, request.method, request.path)
        return error_response(request, 400, "bad-request", "the connection closed mid-request")
    except Exception:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return error_response(request, 500, "internal", _INTERNAL)
