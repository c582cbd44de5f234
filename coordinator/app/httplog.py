"""The logger of the coordinator's HTTP server (aiohttp's ``RequestHandler`` logs through it).

aiohttp logs every request it cannot parse — a header without a colon, a bad ``Content-Length``,
TLS or binary bytes on the plain port, a body it cannot decode — as ``ERROR`` with a traceback
("Error handling request", "Unhandled exception"), although the client already got its ``400``.
That is the client's mistake, not ours: on this logger such records become one ``DEBUG`` line
naming the client and what was wrong, without the traceback (the access log keeps its one line
per request). Everything else aiohttp's server logs passes unchanged.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import RequestPayloadError

__all__ = ["SERVER_LOGGER", "server_logger"]

SERVER_LOGGER: Final = "topos.coordinator.http"


class _ClientErrorsAreDebug(logging.Filter):
    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self._logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:
            reason = str(exc.message)
        elif isinstance(exc, RequestPayloadError):  # a body aiohttp could not decode
            reason = str(exc)
        else:
            return True
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
        record.msg = "refused a malformed HTTP request from %s: %s"
        record.args = (remote, " ".join(reason.split()) or type(exc).__name__)
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        record.exc_info = record.exc_text = None
        return self._logger.isEnabledFor(logging.DEBUG)


def server_logger() -> logging.Logger:
    """The logger to hand aiohttp's server (``AppRunner(..., logger=...)``)."""
    logger = logging.getLogger(SERVER_LOGGER)
    if not any(isinstance(f, _ClientErrorsAreDebug) for f in logger.filters):
        logger.addFilter(_ClientErrorsAreDebug(logger))
    return logger
