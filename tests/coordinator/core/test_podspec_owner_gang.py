"""A pod group declared on the workload's own metadata (a Job's labels or annotations, not its pod
template): its pods get the group's labels, marked as inherited so a later change on the Job
follows; a group the template declares wins; a bad key on the Job is named on its pods."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from coordinator.adapters.kube.owners import owner_of
from coordinator.core.podspec.fields import FieldError
from coordinator.core.podspec.gangkeys import GANG_ERROR, pod_gang_labels
from coordinator.core.podspec.inherit import INHERITED, Inheritance, Owner, inheritance

POD = {"job-name": "trial"}


def job(
    labels: Mapping[str, str] = {}, annotations: Mapping[str, str] = {}, *, pods: int = 3
) -> Owner:
    return Owner(
        "Job", "trial", annotations, pods=pods, labels=labels, namespace="ml", template_labels=POD
    )


def applied(
    annotations: Mapping[str, str], labels: Mapping[str, str], change: Inheritance | None
) -> tuple[dict[str, str], dict[str, str]]:
    """The pod's annotations and labels once the patch is applied."""
    assert change is not None

    def merged(before: Mapping[str, str], patch: Mapping[str, str | None]) -> dict[str, str]:
        return {k: v for k, v in {**before, **patch}.items() if v is not None}

    return merged(annotations, change.annotations), merged(labels, change.labels)


def pod(annotations: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "trial-x", "annotations": annotations, "labels": labels}}


def test_the_users_trial_label_and_minimum_on_the_job_make_its_pods_one_gang() -> None:
    """The playground trial: ``topos.io/gang: onjob`` (label), ``gang-min: "3"`` and
    ``gang-timeout: 30s`` (annotations) on the Job. Only the timeout reached the pods; now the
    group and its minimum do too, marked, and the pod reads as a gang of 3."""
    owner = job(
        {"topos.io/gang": "onjob"}, {"topos.io/gang-min": "3", "topos.io/gang-timeout": "30s"}
    )
    change = inheritance({}, POD, owner)
    assert change is not None
    assert change.labels == {"topos.io/gang": "onjob", "topos.io/gang-min": "3"}
    assert change.annotations == {
        "topos.io/gang-timeout": "30s",
        INHERITED: "topos.io/gang,topos.io/gang-min,topos.io/gang-timeout",
    }
    annotations, labels = applied({}, POD, change)
    gang = pod_gang_labels(pod(annotations, labels))
    assert gang is not None
    assert (gang.name, gang.min_member, gang.timeout_s) == ("onjob", 3, 30.0)
    assert inheritance(annotations, labels, owner) is None  # written once


def test_a_group_named_by_annotation_with_no_minimum_counts_the_jobs_pods() -> None:
    change = inheritance({}, POD, job(annotations={"topos.io/gang": "onjob"}, pods=4))
    assert change is not None
    assert change.labels == {"topos.io/gang": "onjob", "topos.io/gang-min": "4"}
    assert change.annotations == {INHERITED: "topos.io/gang,topos.io/gang-min"}


def test_a_deployments_group_has_minimum_one_as_its_placement_group_does() -> None:
    owner = Owner("Deployment", "web", labels={"topos.io/gang": "web"}, pods=1, most=3)
    change = inheritance({}, {}, owner)
    assert change is not None
    assert change.labels == {"topos.io/gang": "web", "topos.io/gang-min": "1"}


@pytest.mark.parametrize(
    ("labels", "annotations", "written"),
    [
        (  # KubeNexus' spellings, as labels: the pod gets the canonical ones
            {
                "pod-group.scheduling.kubenexus.io/name": "spark",
                "pod-group.scheduling.kubenexus.io/min-available": "2",
            },
            {},
            {"topos.io/gang": "spark", "topos.io/gang-min": "2"},
        ),
        (  # scheduler-plugins': its PodGroup object holds the size
            {"scheduling.x-k8s.io/pod-group": "pg-1"},
            {},
            {"scheduling.x-k8s.io/pod-group": "pg-1"},
        ),
        (  # two spellings that agree, label and annotation
            {"topos.io/gang": "onjob"},
            {"pod-group.scheduling.kubenexus.io/name": "onjob", "topos.io/gang-min": "2"},
            {"topos.io/gang": "onjob", "topos.io/gang-min": "2"},
        ),
    ],
)
def test_every_spelling_a_pod_may_use_declares_the_group_on_the_job(
    labels: dict[str, str], annotations: dict[str, str], written: dict[str, str]
) -> None:
    change = inheritance({}, POD, job(labels, annotations))
    assert change is not None
    assert change.labels == written
    assert change.annotations == {INHERITED: ",".join(sorted(written))}


def test_a_minimum_on_the_job_sizes_the_group_its_placement_keys_make() -> None:
    owner = job(annotations={"topos.io/placement": "consolidated", "topos.io/gang-min": "2"})
    change = inheritance({}, POD, owner)
    assert change is not None
    assert change.labels == {"topos.io/gang": "trial", "topos.io/gang-min": "2"}


def test_a_group_the_pod_template_declares_wins_over_the_jobs() -> None:
    template = {**POD, "topos.io/gang": "mine", "topos.io/gang-min": "2"}
    owner = Owner(
        "Job", "trial", {"topos.io/gang-min": "3"}, 3, template, {"topos.io/gang": "onjob"}, "ml"
    )
    change = inheritance({}, template, owner)
    assert change is None  # nothing written: the pod's own group, unmarked, stands
    # The Job's own key is bad: the pod's group still wins, and the pod is not stopped.
    bad = Owner("Job", "trial", {"topos.io/gang-min": "zero"}, 3, template, {"topos.io/gang": "x"})
    assert inheritance({}, template, bad) is None


def test_a_change_on_the_job_replaces_the_marks_and_a_removed_group_takes_them_away() -> None:
    """Pods not bound yet follow the Job: a new minimum replaces the old; the label taken off the
    Job takes the group labels and their marks off the pods (the timeout stays, still written)."""
    first = job(
        {"topos.io/gang": "onjob"}, {"topos.io/gang-min": "3", "topos.io/gang-timeout": "30s"}
    )
    annotations, labels = applied({}, POD, inheritance({}, POD, first))
    smaller = job(
        {"topos.io/gang": "onjob"}, {"topos.io/gang-min": "2", "topos.io/gang-timeout": "30s"}
    )
    change = inheritance(annotations, labels, smaller)
    assert change is not None
    assert change.labels == {"topos.io/gang-min": "2"}
    assert change.annotations == {}
    gone = job(annotations={"topos.io/gang-timeout": "30s"})
    change = inheritance(annotations, labels, gone)
    assert change is not None
    assert change.labels == {"topos.io/gang": None, "topos.io/gang-min": None}
    assert change.annotations == {INHERITED: "topos.io/gang-timeout"}
    annotations, labels = applied(annotations, labels, change)
    assert pod_gang_labels(pod(annotations, labels)) is None


def test_a_job_switching_to_a_podgroup_object_loses_the_topos_labels() -> None:
    first = job({"topos.io/gang": "onjob"})
    annotations, labels = applied({}, POD, inheritance({}, POD, first))
    change = inheritance(annotations, labels, job({"scheduling.x-k8s.io/pod-group": "pg"}))
    assert change is not None
    assert change.labels == {
        "scheduling.x-k8s.io/pod-group": "pg",
        "topos.io/gang": None,
        "topos.io/gang-min": None,
    }
    assert change.annotations == {INHERITED: "scheduling.x-k8s.io/pod-group"}


@pytest.mark.parametrize(
    ("labels", "annotations", "field", "message"),
    [
        (
            {"topos.io/gang": "onjob"},
            {"topos.io/gang-min": "zero"},
            "Job ml/trial metadata.annotations[topos.io/gang-min]",
            "must be a whole number from 1 to 10000, got 'zero'",
        ),
        (
            {"topos.io/gang": "onjob", "topos.io/gang-min": "0"},
            {},
            "Job ml/trial metadata.labels[topos.io/gang-min]",
            "a pod group needs at least 1 member, got '0'",
        ),
        (  # parallelism 3: a minimum of 4 would never be met
            {"topos.io/gang": "onjob"},
            {"topos.io/gang-min": "4"},
            "Job ml/trial metadata.annotations[topos.io/gang-min]",
            "the group would wait for ever: Job ml/trial runs at most 3 pod(s) at once, got '4'",
        ),
        (
            {},
            {"topos.io/gang-min": "3"},
            "Job ml/trial metadata.annotations[topos.io/gang-min]",
            "set without a gang name",
        ),
        (
            {"topos.io/gang": "onjob"},
            {"topos.io/gang": "other"},
            "Job ml/trial metadata.labels[topos.io/gang]",
            "contradicts Job ml/trial metadata.annotations[topos.io/gang]='other'; use one value",
        ),
        (
            {"scheduling.x-k8s.io/pod-group": ""},
            {},
            "Job ml/trial metadata.labels[scheduling.x-k8s.io/pod-group]",
            "must not be empty",
        ),
        (
            {},
            {"topos.io/gang": "on job"},
            "Job ml/trial metadata.annotations[topos.io/gang]",
            "'on job' is not a label value (at most 63 letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit)",
        ),
    ],
)
def test_a_bad_group_key_on_the_job_is_named_on_its_pods(
    labels: dict[str, str], annotations: dict[str, str], field: str, message: str
) -> None:
    """The pod waits with the key and value named (``invalid <field>: <reason>``, as the same
    key on a pod reads) until the Job is fixed; then the error goes."""
    change = inheritance({}, POD, job(labels, annotations))
    assert change is not None
    assert change.annotations[GANG_ERROR] == f"{field}: {message}"
    after, labels_after = applied({}, POD, change)
    assert set(after[INHERITED].split(",")) >= {GANG_ERROR}
    with pytest.raises(FieldError) as raised:
        pod_gang_labels(pod(after, labels_after))
    assert str(raised.value) == f"{field}: {message}"
    fixed = inheritance(after, labels_after, job({"topos.io/gang": "onjob"}))
    assert fixed is not None
    assert fixed.annotations[GANG_ERROR] is None
    assert fixed.labels.get("topos.io/gang-min") == "3"


def test_a_jobs_metadata_reaches_the_owner_with_what_it_runs_at_once() -> None:
    deploy = {
        "metadata": {"name": "web", "namespace": "ml", "labels": {"topos.io/gang": "web"}},
        "spec": {"replicas": 4},
    }
    rs = {"metadata": {"name": "web-1", "labels": {"pod-template-hash": "1"}}, "spec": {}}
    owner = owner_of([("ReplicaSet", rs), ("Deployment", deploy)])
    assert (owner.where, owner.pods, owner.most) == ("Deployment ml/web", 1, 4)
    assert owner.labels == {"topos.io/gang": "web", "pod-template-hash": "1"}
    spec = {"parallelism": 8, "completions": 2}
    assert owner_of([("Job", {"metadata": {"name": "j"}, "spec": spec})]).most == 2


def test_group_labels_the_job_copied_from_its_template_are_the_templates() -> None:
    """A Job applied without labels gets its template's from the API server: a template that
    writes ``gang-min`` alone is refused as the pod's own label, not as the Job's, and a group the
    template names is the pod's, unmarked."""
    template = {"job-name": "t", "topos.io/gang": "mine", "topos.io/gang-min": "2"}
    obj = {
        "metadata": {"name": "t", "namespace": "ml", "labels": template},
        "spec": {"parallelism": 2, "template": {"metadata": {"labels": template}}},
    }
    owner = owner_of([("Job", obj)])
    assert owner.labels == {}
    assert inheritance({}, template, owner) is None
