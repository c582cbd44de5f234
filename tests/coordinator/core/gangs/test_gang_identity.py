"""Gang identity from the three vocabularies (Topos, KubeNexus, scheduler-plugins PodGroup), with
clear errors for bad values and a clear wait for a PodGroup object that does not exist yet."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.gangs.identity import (
    GangKey,
    GangProblem,
    GangSpec,
    gang_instance_of,
    gang_of,
    gang_of_agent_pool,
)
from coordinator.engine.gangs import running
from coordinator.inventory import translate
from devcluster import pods


def pod(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "ml",
) -> dict[str, Any]:
    return pods.pod("worker-0", labels=labels, annotations=annotations, namespace=namespace)


def test_pod_without_gang_labels_is_not_a_member() -> None:
    assert gang_of(pod({"app": "web"})) is None


def test_topos_labels_and_timeout_annotation() -> None:
    spec = gang_of(
        pod({"topos.io/gang": "train-1", "topos.io/gang-min": "8"}, {"topos.io/gang-timeout": "5m"})
    )
    assert spec == GangSpec(
        key=GangKey("ml", "train-1"), min_member=8, timeout_s=300.0, source="topos"
    )


def test_kubenexus_labels() -> None:
    spec = gang_of(
        pod(
            {
                "pod-group.scheduling.kubenexus.io/name": "distributed-training",
                "pod-group.scheduling.kubenexus.io/min-available": "4",
            }
        )
    )
    assert isinstance(spec, GangSpec)
    assert (spec.key, spec.min_member, spec.source) == (
        GangKey("ml", "distributed-training"),
        4,
        "kubenexus",
    )


def test_scheduler_plugins_pod_group_object() -> None:
    labels = {"scheduling.x-k8s.io/pod-group": "pg-1"}
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg-1", "namespace": "ml"},
        "spec": {"minMember": 3, "scheduleTimeoutSeconds": 120},
    }
    spec = gang_of(pod(labels), {("ml", "pg-1"): group})
    assert spec == GangSpec(
        key=GangKey("ml", "pg-1"), min_member=3, timeout_s=120.0, source="podgroup"
    )


def test_pod_group_label_without_object_waits_with_a_clear_message() -> None:
    result = gang_of(pod({"scheduling.x-k8s.io/pod-group": "pg-2"}), {})
    assert isinstance(result, GangProblem)
    assert result.waiting
    assert result.key == GangKey("ml", "pg-2")
    assert "PodGroup ml/pg-2" in result.message
    assert "does not exist yet" in result.message


def test_pod_group_in_another_namespace_does_not_count() -> None:
    group = {"metadata": {"name": "pg"}, "spec": {"minMember": 2}}
    result = gang_of(pod({"scheduling.x-k8s.io/pod-group": "pg"}), {("other", "pg"): group})
    assert isinstance(result, GangProblem)
    assert result.waiting


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("0", "at least 1 member"),
        ("-3", "at least 1 member"),
        ("eight", "whole number"),
        ("2.5", "whole number"),
        ("", "whole number"),
        ("10001", "more than 10000"),
    ],
)
def test_bad_member_counts(value: str, fragment: str) -> None:
    result = gang_of(pod({"topos.io/gang": "g", "topos.io/gang-min": value}))
    assert isinstance(result, GangProblem)
    assert not result.waiting
    assert fragment in result.message
    assert "topos.io/gang-min" in result.message


def test_bad_kubenexus_count_names_the_kubenexus_label() -> None:
    result = gang_of(
        pod(
            {
                "pod-group.scheduling.kubenexus.io/name": "g",
                "pod-group.scheduling.kubenexus.io/min-available": "-1",
            }
        )
    )
    assert isinstance(result, GangProblem)
    assert "pod-group.scheduling.kubenexus.io/min-available" in result.message


@pytest.mark.parametrize(
    "spec",
    [{"minMember": 0}, {"minMember": "lots"}, {"minMember": True}, {}, {"minMember": 20000}],
)
def test_bad_pod_group_objects(spec: dict[str, Any]) -> None:
    result = gang_of(pod({"scheduling.x-k8s.io/pod-group": "pg"}), {("ml", "pg"): {"spec": spec}})
    assert isinstance(result, GangProblem)
    assert "spec.minMember" in result.message


def test_bad_pod_group_timeout() -> None:
    result = gang_of(
        pod({"scheduling.x-k8s.io/pod-group": "pg"}),
        {("ml", "pg"): {"spec": {"minMember": 2, "scheduleTimeoutSeconds": -5}}},
    )
    assert isinstance(result, GangProblem)
    assert "positive" in result.message


@pytest.mark.parametrize("value", ["soon", "-5", "0", "5x", "9999h"])
def test_bad_timeouts(value: str) -> None:
    result = gang_of(
        pod({"topos.io/gang": "g", "topos.io/gang-min": "2"}, {"topos.io/gang-timeout": value})
    )
    assert isinstance(result, GangProblem)
    assert "topos.io/gang-timeout" in result.message


def test_missing_min_and_conflicting_names() -> None:
    missing = gang_of(pod({"topos.io/gang": "g"}))
    assert isinstance(missing, GangProblem)
    assert "topos.io/gang-min" in missing.message
    both = gang_of(pod({"topos.io/gang": "a", "pod-group.scheduling.kubenexus.io/name": "b"}))
    assert isinstance(both, GangProblem)
    assert "contradictory" in both.message
    two = gang_of(
        pod(
            {
                "topos.io/gang": "a",
                "topos.io/gang-min": "2",
                "scheduling.x-k8s.io/pod-group": "b",
            }
        )
    )
    assert isinstance(two, GangProblem)
    assert "two pod groups" in two.message


def test_garbage_metadata_is_a_problem_naming_the_field_not_a_crash() -> None:
    assert gang_of({}) is None
    for bad, field in [
        ({"metadata": "nonsense"}, "metadata"),
        ({"metadata": {"labels": ["x"]}}, "metadata.labels"),
        ({"metadata": {"labels": {"topos.io/gang": 7}}}, "metadata.labels.topos.io/gang"),
    ]:
        result = gang_of(bad)
        assert isinstance(result, GangProblem)
        assert result.message.startswith(f"invalid {field}: must be a ")


def test_neuronetes_agent_pool_gang() -> None:
    pool = {
        "apiVersion": "neuronetes.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "pipeline-parallel-pool", "namespace": "ml"},
        "spec": {
            "minReplicas": 4,
            "scheduling": {"gangScheduling": {"enabled": True, "minMembers": 4}},
        },
    }
    spec = gang_of_agent_pool(pool)
    assert isinstance(spec, GangSpec)
    assert (spec.key, spec.min_member, spec.source) == (
        GangKey("ml", "pipeline-parallel-pool"),
        4,
        "agentpool",
    )
    pool["spec"]["scheduling"]["gangScheduling"]["enabled"] = False  # type: ignore[index]
    assert gang_of_agent_pool(pool) is None
    pool["spec"]["scheduling"]["gangScheduling"] = {"enabled": True, "minMembers": 0}  # type: ignore[index]
    bad = gang_of_agent_pool(pool)
    assert isinstance(bad, GangProblem)


def _owned(obj: dict[str, Any], *owners: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = list(owners)
    return obj


def test_a_run_of_a_gang_is_named_by_its_workload_not_by_its_name_alone() -> None:
    labels = {"topos.io/gang": "train-1", "topos.io/gang-min": "2"}
    job = {"kind": "Job", "name": "train", "uid": "job-1", "controller": True}
    first = gang_instance_of(_owned(pod(labels), job))
    again = gang_instance_of(_owned(pod(labels), {**job, "uid": "job-2"}))
    assert isinstance(first, GangSpec)
    assert isinstance(again, GangSpec)
    assert first.key == GangKey("ml", "train-1", "job-1")
    assert again.key != first.key  # the Job deleted and applied again: a new gang
    assert str(again.key) == "ml/train-1"  # what users read is unchanged
    # The controller wins over other owners; a JobSet's child Jobs are one workload.
    other = {"kind": "ConfigMap", "name": "x", "uid": "cm-1"}
    assert gang_instance_of(_owned(pod(labels), other, job)).key.uid == "job-1"  # type: ignore[union-attr]
    jobset = pod({**labels, "jobset.sigs.k8s.io/jobset-uid": "js-1"})
    assert gang_instance_of(_owned(jobset, job)).key.uid == "js-1"  # type: ignore[union-attr]
    # Bare pods have no workload: the name is all there is.
    assert gang_instance_of(pod(labels)).key == GangKey("ml", "train-1")  # type: ignore[union-attr]


def test_a_bare_driver_and_a_deployments_executors_are_one_gang() -> None:
    """KubeNexus' Spark example: a driver Pod and a Deployment's executors share a group name.
    Replicas of a ReplicaSet or StatefulSet are no run of a workload, so all are one gang; a
    bound executor, as the inventory keeps it, is counted in that same gang."""
    labels = {
        "pod-group.scheduling.kubenexus.io/name": "spark-job-123",
        "pod-group.scheduling.kubenexus.io/min-available": "11",
    }
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "uid": "rs-1", "controller": True}
    driver = gang_instance_of(pod(labels))
    executor = _owned(pod(labels), rs)
    pending = gang_instance_of(executor)
    assert isinstance(driver, GangSpec)
    assert isinstance(pending, GangSpec)
    assert driver.key == pending.key == GangKey("ml", "spark-job-123")
    executor["spec"]["nodeName"] = "n1"
    bound = translate.bound_pod(executor)
    assert bound is not None
    assert bound.owner_kind == "ReplicaSet"
    assert running.bound_gang(bound, {}) == pending
    sts = {**rs, "kind": "StatefulSet", "uid": "sts-1"}
    assert gang_instance_of(_owned(pod(labels), sts)).key == driver.key  # type: ignore[union-attr]


def test_a_podgroup_gang_run_is_named_by_the_podgroup_objects_uid() -> None:
    labels = {"scheduling.x-k8s.io/pod-group": "pg-1"}
    group = {"metadata": {"name": "pg-1", "namespace": "ml", "uid": "pg-uid-7"}}
    group["spec"] = {"minMember": 2}
    spec = gang_instance_of(pod(labels), {("ml", "pg-1"): group})
    assert isinstance(spec, GangSpec)
    assert spec.key == GangKey("ml", "pg-1", "pg-uid-7")
    waiting = gang_instance_of(pod(labels), {})
    assert isinstance(waiting, GangProblem)
    assert waiting.waiting


def test_a_bare_pod_asking_for_a_placement_is_a_group_of_its_own() -> None:
    # Seed 003's hints on a bare Pod: read by the gang step, as a Job's pods' are.
    hints = {"topology.scheduler/preferred-domain": "leaf-1"}
    bare = pods.pod("solo", namespace="ml", uid="u-solo", annotations=hints)
    spec = gang_instance_of(bare)
    assert spec == GangSpec(key=GangKey("ml", "solo", "u-solo"), min_member=1, source="pod")
    # Bound, it is still that group (the alias annotation is kept on bound pods).
    on_node = pods.pod("solo", namespace="ml", uid="u-solo", annotations=hints, node="n1")
    bound = translate.bound_pod(on_node)
    assert bound is not None
    assert running.bound_gang(bound, {}) == spec
    # Its own run: a gang labelled with the same name is another group.
    other = pod({"topos.io/gang": "solo", "topos.io/gang-min": "2"})
    named = gang_instance_of(other)
    assert isinstance(named, GangSpec)
    assert named.key != spec.key
    # Without a placement key, a pod is in no group.
    assert gang_of(pods.pod("plain", annotations={"topos.io/numa-policy": "isolated"})) is None
