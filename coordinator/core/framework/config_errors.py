"""The scheduling section's error type and its "did you mean" hint (shared by its readers)."""

from __future__ import annotations

import difflib
from collections.abc import Collection

__all__ = ["ConfigError", "hint"]


class ConfigError(ValueError):
    """A scheduler configuration that cannot be used, with the key that is wrong."""


def hint(key: str, known: Collection[str]) -> str:
    """`` — did you mean 'x'?`` for a close known name, else the list of known names."""
    close = difflib.get_close_matches(key, list(known), n=1)
    if close:
        return f" — did you mean {close[0]!r}?"
    return f" (expected one of {', '.join(sorted(known))})"
