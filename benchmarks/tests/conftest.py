"""Fixtures the scheduler_perf tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scheduler_perf
from devcluster.binaries import BinariesUnavailable


@pytest.fixture(scope="module")
def perf_dir() -> Path:
    """upstream's ``test/integration/scheduler_perf`` in the k8s.io/kubernetes module (skipped
    where the module cannot be had)."""
    try:
        directory = scheduler_perf.module_dir()
    except BinariesUnavailable as exc:
        pytest.skip(f"the k8s.io/kubernetes module is not available: {exc}")
    return directory / scheduler_perf.PERF_DIR
