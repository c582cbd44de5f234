"""Skips that cannot hide a failure in CI: with ``CI=true`` a missing prerequisite fails."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test here; under ``CI=true`` fail it (CI installs everything a test needs)."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)
