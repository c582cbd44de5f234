"""What a pod inherits from its workload owner: the owner's keys in the owner's spelling, the
pod's own keys winning, later owner changes followed, and one pod group per placed workload."""

from __future__ import annotations

from common.labels import is_label_value, name_label_value
from coordinator.core.podspec.inherit import INHERITED, Owner, inheritance

SEED = {
    "topology.scheduler/gpu-count": "16",
    "topology.scheduler/preferred-domain": "spine-1",
    "topology.scheduler/placement-strategy": "consolidated",
    "kubectl.kubernetes.io/last-applied-configuration": "{}",
}


def test_a_jobs_keys_reach_its_pods_in_the_seed_spelling_with_a_pod_group() -> None:
    change = inheritance({}, {}, Owner("Job", "train", SEED, pods=4))
    assert change is not None
    assert change.annotations == {
        "topology.scheduler/gpu-count": "16",
        "topology.scheduler/preferred-domain": "spine-1",
        "topology.scheduler/placement-strategy": "consolidated",
        INHERITED: (
            "topology.scheduler/gpu-count,topology.scheduler/placement-strategy,"
            "topology.scheduler/preferred-domain,topos.io/gang,topos.io/gang-min"
        ),
    }
    assert change.labels == {"topos.io/gang": "train", "topos.io/gang-min": "4"}
    assert change.patch()["metadata"] == {
        "annotations": change.annotations,
        "labels": change.labels,
    }


def test_nothing_to_do_once_the_pod_carries_them() -> None:
    owner = Owner("Job", "train", SEED, pods=4)
    change = inheritance({}, {}, owner)
    assert change is not None
    annotations = {k: v for k, v in change.annotations.items() if v is not None}
    labels = {k: v for k, v in change.labels.items() if v is not None}
    assert inheritance(annotations, labels, owner) is None


def test_the_pods_own_key_wins_under_any_spelling() -> None:
    own = {"topos.io/preferred-domain": "leaf-1"}
    change = inheritance(own, {}, Owner("Job", "train", SEED, pods=4))
    assert change is not None
    assert "topology.scheduler/preferred-domain" not in change.annotations
    assert "topos.io/preferred-domain" not in change.annotations


def test_an_owner_change_replaces_and_removes_what_was_inherited() -> None:
    before = {
        "topology.scheduler/gpu-count": "8",
        "topology.scheduler/latency-sensitive": "true",
        INHERITED: (
            "topology.scheduler/gpu-count,topology.scheduler/latency-sensitive,"
            "topos.io/gang,topos.io/gang-min"
        ),
    }
    labels = {"topos.io/gang": "svc", "topos.io/gang-min": "1"}
    owner = Owner("Deployment", "svc", {"topology.scheduler/gpu-count": "4"}, pods=2)
    change = inheritance(before, labels, owner)
    assert change is not None
    assert change.annotations == {
        "topology.scheduler/gpu-count": "4",
        "topology.scheduler/latency-sensitive": None,
        INHERITED: "topology.scheduler/gpu-count,topos.io/gang,topos.io/gang-min",
    }
    assert change.labels == {"topos.io/gang-min": "2"}
    # The owner stops asking for a placement: the group Topos made goes with its keys.
    change = inheritance(before, labels, Owner("Deployment", "svc", {}, pods=2))
    assert change is not None
    assert change.labels == {"topos.io/gang": None, "topos.io/gang-min": None}
    assert change.annotations[INHERITED] is None


def test_no_pod_group_without_placement_keys_or_over_the_pods_own_group() -> None:
    numa = Owner("Job", "j", {"numa.scheduling.kubenexus.io/policy": "single-numa"}, pods=3)
    change = inheritance({}, {}, numa)
    assert change is not None
    assert change.annotations["numa.scheduling.kubenexus.io/policy"] == "single-numa"
    assert change.labels == {}
    own_group = {"pod-group.scheduling.kubenexus.io/name": "mine"}
    change = inheritance({}, own_group, Owner("Job", "j", SEED, pods=4))
    assert change is not None
    assert change.labels == {}
    change = inheritance({}, {}, Owner("Job", "j", SEED, pods=4), has_scheduling_group=True)
    assert change is not None
    assert change.labels == {}


def test_an_owner_without_keys_changes_nothing() -> None:
    assert inheritance({"a": "b"}, {"app": "x"}, Owner("Deployment", "web", {"x": "y"})) is None


def test_a_deployments_gpu_share_reaches_its_pods_without_making_a_group() -> None:
    """``topos.io/gpu-fraction`` written on the Deployment, not its pod template, still asks for
    part of a GPU on every replica (KAI's spelling too); a share alone groups nothing."""
    owner = Owner("Deployment", "halves", {"topos.io/gpu-fraction": "0.5", "gpu-memory": "2000"})
    change = inheritance({}, {}, owner)
    assert change is not None
    assert change.annotations["topos.io/gpu-fraction"] == "0.5"
    assert change.annotations["gpu-memory"] == "2000"
    assert not change.labels


def test_a_workload_named_longer_than_a_label_value_still_makes_a_valid_group() -> None:
    """Object names may be 253 characters, label values 63: the group label of a long-named
    Deployment is shortened with a hash (it was the name itself, and the API server refused the
    patch, so the pods were placed one by one with the workload's keys unread)."""
    long_name = "inference-" + "x" * 70
    change = inheritance({}, {}, Owner("Deployment", long_name, SEED, pods=2))
    assert change is not None
    group = change.labels["topos.io/gang"]
    assert group is not None
    assert is_label_value(group)
    assert group.startswith("inference-xxx")
    assert group != name_label_value("inference-" + "x" * 71)
    labels = {k: v for k, v in change.labels.items() if v is not None}
    annotations = {k: v for k, v in change.annotations.items() if v is not None}
    assert inheritance(annotations, labels, Owner("Deployment", long_name, SEED, pods=2)) is None


def test_a_workloads_runtime_keys_reach_its_pods_without_making_a_group() -> None:
    # Written on the JobSet (or Job, Deployment) rather than the pod template: preemption's
    # protections and the expected duration a forecast counts on hold for every pod of it.
    keys = {
        "topos.io/min-runtime": "1h",
        "topos.io/preemption-delay": "5m",
        "topos.io/expected-duration": "10m",
    }
    change = inheritance({}, {}, Owner("JobSet", "train", keys, pods=4))
    assert change is not None
    assert {k: v for k, v in change.annotations.items() if k != INHERITED} == keys
    assert change.labels == {}  # runtime keys ask for no placement: no pod group of their own


JOB_KEYS = {"topos.io/gang-topology": "example.com/rack"}


def test_group_labels_on_the_pod_template_win_even_when_named_after_the_job() -> None:
    """The playground user's Job ``train``: ``topos.io/gang: train`` and ``gang-min: "2"`` on
    its pod template, parallelism 3. Those labels are the user's (unmarked): the pods keep
    minimum 2 (the group was taken for Topos's own, and its minimum set to 3, before)."""
    written = {"topos.io/gang": "train", "topos.io/gang-min": "2"}
    owner = Owner("Job", "train", JOB_KEYS, pods=3, template_labels=written)
    change = inheritance({}, {**written, "job-name": "train"}, owner)
    assert change is not None
    assert change.labels == {}
    assert change.annotations == {
        "topos.io/gang-topology": "example.com/rack",
        INHERITED: "topos.io/gang-topology",  # the gang's labels are not listed: not Topos's
    }
    # The same, scaled: the user's minimum still stands.
    pod = {**written, "job-name": "train"}
    kept = {"topos.io/gang-topology": "example.com/rack", INHERITED: "topos.io/gang-topology"}
    assert inheritance(kept, pod, Owner("Job", "train", JOB_KEYS, 4, written)) is None


def test_the_group_topos_made_follows_the_jobs_size_while_pending() -> None:
    owner = Owner("Job", "train", JOB_KEYS, pods=2)
    first = inheritance({}, {}, owner)
    assert first is not None
    annotations = {k: v for k, v in first.annotations.items() if v is not None}
    labels = {k: v for k, v in first.labels.items() if v is not None}
    assert annotations[INHERITED] == "topos.io/gang,topos.io/gang-min,topos.io/gang-topology"
    scaled = inheritance(annotations, labels, Owner("Job", "train", JOB_KEYS, pods=3))
    assert scaled is not None
    assert scaled.labels == {"topos.io/gang-min": "3"}
    assert scaled.annotations == {}


def test_pods_labelled_by_the_rule_before_the_mark_are_told_apart_by_the_template() -> None:
    """A coordinator upgrade with pods pending: their group labels carry no mark. The Job's pod
    template says who wrote them."""
    old = {"topos.io/gang": "train", "topos.io/gang-min": "3", "job-name": "train"}
    inherited = {"topos.io/gang-topology": "example.com/rack", INHERITED: "topos.io/gang-topology"}
    # No group label on the template: Topos wrote them; they are marked now and follow the Job.
    ours = inheritance(inherited, old, Owner("Job", "train", JOB_KEYS, pods=4))
    assert ours is not None
    assert ours.labels == {"topos.io/gang-min": "4"}
    assert ours.annotations == {INHERITED: "topos.io/gang,topos.io/gang-min,topos.io/gang-topology"}
    # The template names the group: the user did, and the minimum the old rule overwrote (3,
    # the parallelism) gets the template's value back.
    written = {"topos.io/gang": "train", "topos.io/gang-min": "2"}
    owner = Owner("Job", "train", JOB_KEYS, pods=3, template_labels=written)
    users = inheritance(inherited, old, owner)
    assert users is not None
    assert users.labels == {"topos.io/gang-min": "2"}
    assert users.annotations == {}
