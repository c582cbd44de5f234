"""Fixtures for discovery tests: the real nvidia-smi outputs in ../shared/hw/raw (when present)."""

from __future__ import annotations

from pathlib import Path

import pytest

RAW_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "hw" / "raw"


@pytest.fixture
def raw_dir() -> Path:
    if not RAW_DIR.is_dir():
        pytest.skip("../shared/hw/raw is not present (it is in CI)")
    return RAW_DIR
