"""Errors the command line reports as one line on stderr."""

from __future__ import annotations


class CliError(Exception):
    """A user-facing failure: printed as ``topos: <message>``, exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
