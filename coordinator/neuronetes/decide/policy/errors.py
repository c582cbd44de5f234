"""The one error type of the policies: bad input, with the field that is wrong in the message."""

from __future__ import annotations

__all__ = ["PolicyError"]


class PolicyError(ValueError):
    """Input a policy cannot use (a negative price, malformed hours, an unknown region)."""
