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
            "topology.scheduler/preferred-domain"
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
        INHERITED: "topology.scheduler/gpu-count,topology.scheduler/latency-sensitive",
    }
    labels = {"topos.io/gang": "svc", "topos.io/gang-min": "1"}
    owner = Owner("Deployment", "svc", {"topology.scheduler/gpu-count": "4"}, pods=2)
    change = inheritance(before, labels, owner)
    assert change is not None
    assert change.annotations == {
        "topology.scheduler/gpu-count": "4",
        "topology.scheduler/latency-sensitive": None,
        INHERITED: "topology.scheduler/gpu-count",
    }
    assert change.labels == {"topos.io/gang-min": "2"}


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
