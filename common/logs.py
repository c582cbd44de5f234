"""Logging set-up shared by the programs: one JSON object per line.

Every record becomes ``{"ts": …, "level": …, "logger": …, "msg": …}`` plus whatever the caller
passed in ``extra=`` (``log.info("published", extra={"node": "n1"})``), so log pipelines can filter
on fields instead of parsing prose. Values that JSON can't hold are written with ``str()``.
Exceptions are folded into the same object (``"exc"``), never spread over several lines.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Final

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD: Final = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


def setup_logging(
    *, level: str | int = "INFO", stream: IO[str] | None = None, json_lines: bool = True
) -> None:
    """Route the root logger to ``stream`` (stderr), as JSON lines unless ``json_lines=False``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_lines else logging.Formatter("%(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())


__all__ = ["JsonFormatter", "setup_logging"]
