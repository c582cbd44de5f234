"""The fourth gang vocabulary, Kubernetes' Workload API: a pod joins a PodGroup of
``scheduling.k8s.io/v1alpha2`` by ``spec.schedulingGroup.podGroupName``; the group sizes it."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.gangs.identity import (
    GangKey,
    GangProblem,
    GangSpec,
    gang_of,
    workload_group_key,
)
from coordinator.core.podspec.parse import PodSpecError, parse_pod
from devcluster import pods


def member(group: str = "train", **kw: Any) -> dict[str, Any]:
    return pods.pod("w-0", namespace="ml", spec={"schedulingGroup": {"podGroupName": group}}, **kw)


def groups(policy: dict[str, Any], name: str = "train") -> dict[tuple[str, str], Any]:
    obj = {"metadata": {"namespace": "ml", "name": name}, "spec": {"schedulingPolicy": policy}}
    return {workload_group_key("ml", name): obj}


def test_a_member_takes_its_size_from_the_podgroups_gang_policy() -> None:
    spec = gang_of(member(), groups({"gang": {"minCount": 3}}))
    assert spec == GangSpec(key=GangKey("ml", "train"), min_member=3, source="workload")


def test_the_timeout_annotation_applies_to_workload_members() -> None:
    pod = member(annotations={"topos.io/gang-timeout": "90s"})
    spec = gang_of(pod, groups({"gang": {"minCount": 2}}))
    assert isinstance(spec, GangSpec)
    assert spec.timeout_s == 90.0


def test_a_member_waits_for_its_podgroup_with_a_message() -> None:
    problem = gang_of(member())
    assert isinstance(problem, GangProblem)
    assert problem.waiting
    assert problem.message == (
        "waiting for PodGroup ml/train (scheduling.k8s.io/v1alpha2) named by "
        "spec.schedulingGroup.podGroupName: it does not exist yet"
    )


def test_a_scheduler_plugins_podgroup_of_the_same_name_is_not_the_workload_one() -> None:
    plugins = {("ml", "train"): {"spec": {"minMember": 3}}}
    problem = gang_of(member(), plugins)
    assert isinstance(problem, GangProblem)
    assert problem.waiting


def test_the_basic_policy_schedules_each_pod_alone() -> None:
    assert gang_of(member(), groups({"basic": {}})) is None


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"gang": {"minCount": 0}}, "spec.schedulingPolicy.gang.minCount: a pod group needs"),
        ({"gang": {"minCount": "x"}}, "spec.schedulingPolicy.gang.minCount: must be a whole"),
        ({}, "has no spec.schedulingPolicy.gang or .basic"),
    ],
)
def test_an_unusable_podgroup_is_a_problem_not_a_wait(policy: dict[str, Any], says: str) -> None:
    problem = gang_of(member(), groups(policy))
    assert isinstance(problem, GangProblem)
    assert not problem.waiting
    assert says in problem.message


def test_a_pod_that_also_carries_a_gang_label_is_refused() -> None:
    pod = member(gang=("other", 2))
    problem = gang_of(pod, groups({"gang": {"minCount": 2}}))
    assert isinstance(problem, GangProblem)
    assert not problem.waiting
    assert problem.message == (
        "invalid spec.schedulingGroup.podGroupName: pod names two pod groups: 'train' here "
        "and 'other' by label; use one"
    )
    refused = parse_pod(pod)
    assert isinstance(refused, PodSpecError)
    assert refused.field == "spec.schedulingGroup.podGroupName"


def test_an_empty_group_name_is_refused() -> None:
    problem = gang_of(member(""))
    assert isinstance(problem, GangProblem)
    assert "spec.schedulingGroup.podGroupName: must not be empty" in problem.message


def test_the_pod_parser_reads_the_scheduling_group() -> None:
    request = parse_pod(member())
    assert not isinstance(request, PodSpecError)
    assert request.gang is not None
    assert (request.gang.name, request.gang.min_member, request.gang.source) == (
        "train",
        None,
        "workload",
    )
