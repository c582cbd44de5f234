"""The environment for the Python processes tests start (the ``topos`` CLI, the agent, the demo,
``python -c``): bytecode writing off, so a child leaves no ``__pycache__`` in the source tree —
``python -B -m pytest`` then writes none at all (``tests/conftest.py`` checks it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

NO_BYTECODE: Final[Mapping[str, str]] = {"PYTHONDONTWRITEBYTECODE": "1"}


def subprocess_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (this process's environment by default) with ``extra`` on top and bytecode off."""
    return {**(os.environ if base is None else base), **extra, **NO_BYTECODE}
