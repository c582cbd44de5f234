"""Volcano's and KAI's gang vocabularies: pods naming their PodGroup objects by annotation, sizes
read from those objects as the projects define them, bad input named with key and value, the
ignored fields told once, and their status in their own fields."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.gangs.foreigngroups import (
    KAI,
    VOLCANO,
    foreign_group_key,
    ignored,
    kai_status,
    volcano_status,
)
from coordinator.core.gangs.groupstatus import MemberCounts
from coordinator.core.gangs.identity import (
    GangKey,
    GangProblem,
    GangSpec,
    gang_instance_of,
    gang_of,
)
from coordinator.core.podspec.inherit import Owner, inheritance
from coordinator.core.podspec.parse import PodSpecError, parse_pod
from coordinator.engine.gangs import running
from coordinator.inventory import translate
from devcluster import pods

VOLCANO_KEY = "scheduling.k8s.io/group-name"
KAI_KEY = "pod-group-name"
NOW = "2026-11-29T10:00:00Z"


def pod(
    annotations: dict[str, str], labels: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    return pods.pod("worker-0", namespace="ml", annotations=annotations, labels=labels, **kw)


def volcano_group(name: str, spec: dict[str, Any], uid: str = "v-uid") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"namespace": "ml", "name": name, "uid": uid},
        "spec": spec,
    }


def kai_group(name: str, spec: dict[str, Any], uid: str = "k-uid") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"namespace": "ml", "name": name, "uid": uid},
        "spec": spec,
    }


def groups(*objs: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for obj in objs:
        kind = VOLCANO if obj["apiVersion"].startswith("scheduling.volcano.sh") else KAI
        out[foreign_group_key(kind, "ml", obj["metadata"]["name"])] = obj
    return out


def test_a_volcano_member_takes_its_size_from_the_volcano_podgroup() -> None:
    objs = groups(volcano_group("tf", {"minMember": 3, "queue": "default"}))
    spec = gang_of(pod({VOLCANO_KEY: "tf", "topos.io/gang-timeout": "90s"}), objs)
    assert spec == GangSpec(key=GangKey("ml", "tf"), min_member=3, timeout_s=90.0, source="volcano")
    run = gang_instance_of(pod({VOLCANO_KEY: "tf"}), objs)
    assert isinstance(run, GangSpec)
    assert run.key.uid == "v-uid"


def test_a_kai_member_takes_its_size_from_the_kai_podgroup() -> None:
    objs = groups(kai_group("llm", {"minMember": 4, "queue": "team-a"}))
    spec = gang_of(pod({KAI_KEY: "llm"}), objs)
    assert spec == GangSpec(key=GangKey("ml", "llm"), min_member=4, source="kai")


def test_a_kai_podgroup_without_min_member_is_one_pod_and_subgroups_add_up() -> None:
    assert gang_of(pod({KAI_KEY: "one"}), groups(kai_group("one", {"queue": "q"}))) == GangSpec(
        key=GangKey("ml", "one"), min_member=1, source="kai"
    )
    # KAI's multi-topology example: two leaf subgroups of 3, minSubGroup 2.
    pipeline = kai_group(
        "pipeline",
        {
            "queue": "default-queue",
            "minSubGroup": 2,
            "subGroups": [
                {"name": "rack-workers", "minMember": 3},
                {"name": "zone-workers", "minMember": 3},
            ],
        },
    )
    spec = gang_of(pod({KAI_KEY: "pipeline"}), groups(pipeline))
    assert isinstance(spec, GangSpec)
    assert spec.min_member == 6
    # A parent subgroup counts through its leaves only.
    nested = kai_group(
        "nested",
        {
            "subGroups": [
                {"name": "all", "minSubGroup": 2},
                {"name": "a", "parent": "all", "minMember": 2},
                {"name": "b", "parent": "all", "minMember": 1},
            ]
        },
    )
    spec = gang_of(pod({KAI_KEY: "nested"}), groups(nested))
    assert isinstance(spec, GangSpec)
    assert spec.min_member == 3


def test_a_missing_podgroup_is_waited_for_naming_the_annotation() -> None:
    problem = gang_of(pod({VOLCANO_KEY: "later"}), {})
    assert isinstance(problem, GangProblem)
    assert problem.waiting
    assert problem.message == (
        "waiting for PodGroup ml/later (scheduling.volcano.sh/v1beta1) named by annotation "
        "scheduling.k8s.io/group-name: it does not exist yet"
    )
    # A Volcano PodGroup of that name does not satisfy a KAI member.
    problem = gang_of(pod({KAI_KEY: "tf"}), groups(volcano_group("tf", {"minMember": 2})))
    assert isinstance(problem, GangProblem)
    assert problem.waiting
    assert "scheduling.run.ai/v2alpha2" in problem.message


@pytest.mark.parametrize(
    ("obj", "annotation", "message"),
    [
        (
            volcano_group("g", {"minMember": 0}),
            VOLCANO_KEY,
            "PodGroup ml/g (scheduling.volcano.sh/v1beta1) spec.minMember: a pod group needs at "
            "least 1 member, got 0",
        ),
        (
            volcano_group("g", {"queue": "default"}),
            VOLCANO_KEY,
            "PodGroup ml/g (scheduling.volcano.sh/v1beta1) spec.minMember: must be a whole number "
            "from 1 to 10000, got None",
        ),
        (
            kai_group("g", {"minMember": 20000}),
            KAI_KEY,
            "PodGroup ml/g (scheduling.run.ai/v2alpha2) spec.minMember: more than 10000 members "
            "is not supported, got 20000",
        ),
        (
            kai_group("g", {"subGroups": [{"name": "a", "minMember": 0}]}),
            KAI_KEY,
            "PodGroup ml/g (scheduling.run.ai/v2alpha2) spec.subGroups[].minMember (their sum): "
            "a pod group needs at least 1 member, got 0",
        ),
    ],
)
def test_an_unusable_size_is_named_with_its_field_and_value(
    obj: dict[str, Any], annotation: str, message: str
) -> None:
    problem = gang_of(pod({annotation: "g"}), groups(obj))
    assert isinstance(problem, GangProblem)
    assert not problem.waiting
    assert problem.message == message
    assert problem.key == GangKey("ml", "g")


@pytest.mark.parametrize(
    ("annotations", "labels", "extra", "shown"),
    [
        (
            {VOLCANO_KEY: "a", KAI_KEY: "b"},
            None,
            {},
            "metadata.annotations[scheduling.k8s.io/group-name]='a' and "
            "metadata.annotations[pod-group-name]='b'",
        ),
        (
            {KAI_KEY: "a"},
            {"topos.io/gang": "b", "topos.io/gang-min": "2"},
            {},
            "metadata.annotations[pod-group-name]='a' and metadata.labels[topos.io/gang]='b'",
        ),
        (
            {VOLCANO_KEY: "a"},
            {"scheduling.x-k8s.io/pod-group": "a"},
            {},
            "metadata.annotations[scheduling.k8s.io/group-name]='a' and "
            "metadata.labels[scheduling.x-k8s.io/pod-group]='a'",
        ),
        (
            {VOLCANO_KEY: "a"},
            None,
            {"schedulingGroup": {"podGroupName": "w"}},
            "metadata.annotations[scheduling.k8s.io/group-name]='a' and "
            "spec.schedulingGroup.podGroupName='w'",
        ),
    ],
)
def test_two_vocabularies_on_one_pod_are_refused_naming_both_keys_and_values(
    annotations: dict[str, str],
    labels: dict[str, str] | None,
    extra: dict[str, Any],
    shown: str,
) -> None:
    obj = pod(annotations, labels)
    obj["spec"].update(extra)
    objs = groups(volcano_group("a", {"minMember": 1}), kai_group("a", {"minMember": 1}))
    problem = gang_of(obj, objs)
    assert isinstance(problem, GangProblem)
    assert not problem.waiting
    first = next(iter(annotations))
    assert problem.message == (
        f"invalid metadata.annotations[{first}]: pod names two pod groups: {shown}; use one"
    )
    # The pod parser refuses it with the same words (the pod's condition and Event say them).
    refused = parse_pod(obj)
    assert isinstance(refused, PodSpecError)
    assert (refused.field, refused.message) == (
        f"metadata.annotations[{first}]",
        f"pod names two pod groups: {shown}; use one",
    )


def test_an_empty_group_name_is_refused() -> None:
    problem = gang_of(pod({KAI_KEY: " "}), {})
    assert isinstance(problem, GangProblem)
    assert problem.message == "invalid metadata.annotations[pod-group-name]: must not be empty"


def test_a_bound_members_annotation_survives_into_the_inventory() -> None:
    """Recovery and preemption read bound pods back: the group annotation must stay."""
    obj = pod({VOLCANO_KEY: "tf", "unrelated": "x"}, node="n1", uid="p1")
    obj["spec"]["schedulerName"] = "topos"
    bound = translate.bound_pod(obj)
    assert bound is not None
    assert bound.annotations == {VOLCANO_KEY: "tf"}
    spec = running.bound_gang(bound, groups(volcano_group("tf", {"minMember": 2})))
    assert spec is not None
    assert (spec.source, spec.min_member) == ("volcano", 2)


def test_the_queue_and_other_ignored_fields_make_one_message() -> None:
    said = ignored(VOLCANO, volcano_group("g", {"minMember": 2, "queue": "research"}))
    assert said == (
        "QueueIgnored",
        "Topos has no queues: spec.queue='research' is ignored and the gang is placed without it",
    )
    said = ignored(
        KAI,
        kai_group(
            "g",
            {
                "queue": "default-queue",
                "topologyConstraint": {"requiredTopologyLevel": "rack"},
                "subGroups": [{"name": "a", "minMember": 2, "topologyConstraint": {"x": "y"}}],
            },
        ),
    )
    assert said is not None
    assert said[0] == "QueueIgnored"
    assert said[1].endswith(
        "; not honoured either: spec.subGroups (their leaves' minMember are placed as one gang), "
        "spec.topologyConstraint, spec.subGroups[].topologyConstraint"
    )
    assert ignored(KAI, kai_group("g", {"minMember": 2})) is None
    assert ignored(VOLCANO, volcano_group("g", {"minMember": 1, "minResources": {"cpu": 1}})) == (
        "FieldsIgnored",
        "Topos places this gang by its size; not honoured either: spec.minResources",
    )


def test_volcano_status_follows_its_phases() -> None:
    few = volcano_status(3, MemberCounts(pods=2), "waiting", {}, now=NOW)
    assert few is not None
    assert few["phase"] == "Pending"
    [c] = few["conditions"]
    assert (c["type"], c["status"], c["reason"]) == ("Unschedulable", "True", "NotEnoughTasks")
    assert c["message"] == "2 of 3 members exist"

    refused = volcano_status(3, MemberCounts(pods=3), "no room", few, now=NOW)
    assert refused is not None
    assert refused["phase"] == "Inqueue"
    [c] = refused["conditions"]
    assert (c["reason"], c["message"]) == ("NotEnoughResources", "no room")

    status = {**few, **refused}
    placed = volcano_status(3, MemberCounts(pods=3, scheduled=3), None, status, now=NOW)
    assert placed is not None
    assert placed["phase"] == "Running"
    by_type = {c["type"]: c for c in placed["conditions"]}
    assert by_type["Scheduled"]["status"] == "True"
    assert by_type["Unschedulable"]["status"] == "False"
    status.update(placed)

    run = MemberCounts(pods=3, scheduled=3, running=3)
    running_now = volcano_status(3, run, None, status, now=NOW)
    assert running_now == {"running": 3}
    status.update(running_now)
    assert volcano_status(3, run, None, status, now=NOW) is None  # steady: nothing to write

    done = volcano_status(3, MemberCounts(pods=3, scheduled=3, succeeded=3), None, status, now=NOW)
    assert done is not None
    assert done["phase"] == "Completed"
    assert done["succeeded"] == 3


def test_kai_status_has_one_unschedulable_condition_until_placed() -> None:
    first = kai_status(2, 0, "no room", {}, now=NOW)
    assert first is not None
    [c] = first["schedulingConditions"]
    assert (c["type"], c["nodePool"], c["status"], c["transitionID"]) == (
        "UnschedulableOnNodePool",
        "default",
        "True",
        "1",
    )
    assert c["message"] == "no room"
    assert c["reasons"] == [{"reason": "Unschedulable", "message": "no room"}]
    assert kai_status(2, 0, "no room", first, now=NOW) is None  # said already
    second = kai_status(2, 0, "still no room", first, now=NOW)
    assert second is not None
    assert second["schedulingConditions"][0]["transitionID"] == "2"
    assert kai_status(2, 2, None, second, now=NOW) == {"schedulingConditions": None}
    assert kai_status(2, 2, None, {}, now=NOW) is None


def test_a_member_of_a_volcano_or_kai_group_gets_no_gang_label_from_its_job() -> None:
    """A Job asking for a placement makes its pods one Topos gang, unless they name a group:
    then its pods would name two and be refused."""
    job = Owner("Job", "tf", {"topos.io/placement": "consolidated"}, pods=3)
    for key in (VOLCANO_KEY, KAI_KEY):
        got = inheritance({key: "tf"}, {}, job)
        assert got is not None
        assert got.labels == {}
        assert got.annotations["topos.io/placement"] == "consolidated"
    plain = inheritance({}, {}, job)
    assert plain is not None
    assert plain.labels == {"topos.io/gang": "tf", "topos.io/gang-min": "3"}
