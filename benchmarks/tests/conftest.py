"""Fixtures the scheduler_perf tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scheduler_perf_workload as workload_yaml
from devcluster.binaries import BinariesUnavailable


@pytest.fixture(scope="module")
def perf_dir() -> Path:
    """upstream's ``test/integration/scheduler_perf`` in the k8s.io/kubernetes module (skipped
    where the module cannot be had)."""
    try:
        directory = workload_yaml.module_dir()
    except BinariesUnavailable as exc:
        pytest.skip(f"the k8s.io/kubernetes module is not available: {exc}")
    return directory / workload_yaml.PERF_DIR
