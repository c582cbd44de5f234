"""The in-memory cluster keeps ``batch/v1`` Job objects for the scheduler runtime
(``runtime.jobs``: whether a Job's pods may be moved), and refuses any other kind, naming it."""

from __future__ import annotations

import pytest

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.inventory.store import Inventory

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": "ml", "uid": "job-1"},
    "spec": {"podFailurePolicy": {"rules": []}},
}


def test_a_job_applied_is_what_the_runtime_reads() -> None:
    cluster = MemoryCluster(Inventory())
    runtime = memory_runtime(cluster.inventory, cluster)
    assert list(runtime.jobs()) == []
    cluster.apply_job(JOB)
    cluster.apply_job({**JOB, "spec": {}})  # the same Job again replaces it
    assert [j["spec"] for j in runtime.jobs()] == [{}]


def test_another_kind_is_refused_naming_it() -> None:
    cluster = MemoryCluster(Inventory())
    with pytest.raises(ValueError, match="kind: 'Deployment' is not Job"):
        cluster.apply_job({**JOB, "kind": "Deployment"})
    assert cluster.jobs() == []
