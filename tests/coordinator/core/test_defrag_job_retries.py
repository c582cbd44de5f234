"""A Job's pods are movable when Kubernetes' Job controller would recreate an evicted one without
the Job failing: its podFailurePolicy ignores DisruptionTarget, or it has a retry left for each
of its running pods (backoffLimit − failures so far); never once finished or suspended, nor when
another controller manages the Job."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.preemption.defrag import movability
from coordinator.core.preemption.jobretries import eviction_costs_nothing
from coordinator.engine.gangs.running import restartable_jobs
from coordinator.inventory.state import BoundPod

IGNORE_DISRUPTION = {
    "action": "Ignore",
    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
}
FAIL_ON_EXIT = {
    "action": "FailJob",
    "onExitCodes": {"containerName": "work", "operator": "In", "values": [42]},
}


def job(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml", "uid": "job-uid"},
        "spec": spec or {},
        "status": status or {},
    }


@pytest.mark.parametrize(
    ("spec", "status", "pods", "free"),
    [
        ({}, {}, 1, True),  # backoffLimit defaults to 6
        ({"backoffLimit": 0}, {}, 1, False),  # the first failure fails the Job
        ({"backoffLimit": 2}, {"failed": 1}, 1, True),
        ({"backoffLimit": 2}, {"failed": 1}, 2, False),  # two moves would be 3 > 2
        ({"backoffLimit": 2}, {"failed": 2}, 1, False),
        ({"backoffLimit": 2}, {"uncountedTerminatedPods": {"failed": ["a", "b"]}}, 1, False),
        ({"backoffLimit": 0, "podFailurePolicy": {"rules": [IGNORE_DISRUPTION]}}, {}, 3, True),
        (
            {"backoffLimit": 0, "podFailurePolicy": {"rules": [FAIL_ON_EXIT, IGNORE_DISRUPTION]}},
            {},
            1,
            False,  # an exit-code rule that fails the Job comes first
        ),
        ({"backoffLimitPerIndex": 3, "completionMode": "Indexed"}, {}, 1, False),
        ({"suspend": True}, {}, 1, False),
        ({}, {"conditions": [{"type": "Complete", "status": "True"}]}, 1, False),
        ({"backoffLimit": "six"}, {}, 1, False),
        ({"managedBy": "kueue.x-k8s.io/multikueue"}, {}, 1, False),  # not Kubernetes' controller
        ({"managedBy": "kubernetes.io/job-controller"}, {}, 1, True),
    ],
)
def test_whether_evicting_a_jobs_pods_costs_it_nothing(
    spec: dict[str, Any], status: dict[str, Any], pods: int, free: bool
) -> None:
    assert eviction_costs_nothing(job(spec, status), pods) is free


def test_a_job_pod_is_movable_only_when_its_restart_is_free_or_it_is_marked() -> None:
    assert movability("Job", {}) is False
    assert movability("Job", {}, restarts_free=True) is True
    assert movability("Job", {"topos.io/movable": "false"}, restarts_free=True) is False
    assert movability("Job", {"topos.io/movable": "true"}) is True


def bound(name: str, owner: str, **kw: Any) -> BoundPod:
    return BoundPod(
        uid=f"u-{name}",
        namespace="ml",
        name=name,
        node="n1",
        owner_uid=owner,
        owner_kind="Job",
        **kw,
    )


def test_a_job_counts_every_pod_of_it_that_runs() -> None:
    one_retry = job({"backoffLimit": 1})
    pods = [bound("a-1", "job-uid")]
    assert restartable_jobs(pods, [one_retry]) == {"job-uid"}
    # Two of its pods run: both might move, and two failures would fail it.
    assert restartable_jobs([*pods, bound("a-2", "job-uid")], [one_retry]) == set()
    # A pod already leaving is not counted again.
    assert restartable_jobs([*pods, bound("a-2", "job-uid", terminating=True)], [one_retry]) == {
        "job-uid"
    }
    assert restartable_jobs(pods, []) == set()  # the Job is not known: not movable
