"""Gangs without a PodGroup (core/podspec/workloadgangs.py): what forms the gang of a JobSet, an
LWS group and a RayCluster, the labels a pod gets for it (inherit.py) and how the gang step then
reads them (gangkeys.py, core/gangs/identity.py)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.gangs.identity import GangProblem, GangSpec, gang_instance_of
from coordinator.core.podspec.inherit import inheritance
from coordinator.core.podspec.workloadgangs import (
    WorkloadGang,
    WorkloadGangError,
    jobset_gang,
    lws_gang,
    raycluster_gang,
)

POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml"}}


def rjob(name: str, replicas: int = 1, parallelism: int = 1, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism, **extra.pop("job", {})}
    return {"name": name, "replicas": replicas, "template": {"spec": spec}, **extra}


def jobset(*rjobs: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any) -> Any:
    meta = {"name": "train", "namespace": "ml", "uid": "js-1", "labels": labels or {}}
    return {"metadata": meta, "spec": {"replicatedJobs": list(rjobs), **spec}}


def test_a_jobset_is_one_gang_of_every_pod_of_every_replicated_job() -> None:
    js = jobset(rjob("driver"), rjob("workers", replicas=2, parallelism=4))
    gang = jobset_gang(js, POD, replicated_job="workers", restart_attempt="0")
    assert gang == WorkloadGang("JobSet", "train", "train", 1 + 2 * 4, "js-1-0")
    assert jobset_gang(js, POD, replicated_job="driver", restart_attempt="0") == gang


def test_completions_cap_a_jobs_pods() -> None:
    js = jobset(rjob("w", replicas=3, parallelism=4, job={"completions": 2}))
    gang = jobset_gang(js, POD, replicated_job="w", restart_attempt="0")
    assert isinstance(gang, WorkloadGang)
    assert gang.min_member == 6


def test_in_order_startup_makes_one_gang_per_replicated_job() -> None:
    js = jobset(
        rjob("leader", replicas=2),
        rjob("workers", replicas=4),
        startupPolicy={"startupPolicyOrder": "InOrder"},
    )
    leader = jobset_gang(js, POD, replicated_job="leader", restart_attempt="0")
    workers = jobset_gang(js, POD, replicated_job="workers", restart_attempt="0")
    assert isinstance(leader, WorkloadGang)
    assert isinstance(workers, WorkloadGang)
    assert (leader.name, leader.min_member) == ("train-leader", 2)
    assert (workers.name, workers.min_member) == ("train-workers", 4)
    one = jobset(rjob("driver"), rjob("w", replicas=4), startupPolicy=js["spec"]["startupPolicy"])
    assert jobset_gang(one, POD, replicated_job="driver", restart_attempt="0") is None  # 1 pod


def test_exclusive_placement_makes_the_leaders_one_gang_and_the_followers_another() -> None:
    """JobSet's webhook refuses a Job's followers until its leader is scheduled."""
    js = jobset(rjob("w", replicas=3, parallelism=4))
    exclusive = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "topos.io/leaf"}

    def pod(index: str, **more: str) -> Any:
        annotations = {**exclusive, "batch.kubernetes.io/job-completion-index": index, **more}
        return {"metadata": {"name": "p", "annotations": annotations}}

    leaders = jobset_gang(js, pod("0"), replicated_job="w", restart_attempt="0")
    followers = jobset_gang(js, pod("3"), replicated_job="w", restart_attempt="0")
    assert isinstance(leaders, WorkloadGang)
    assert isinstance(followers, WorkloadGang)
    assert (leaders.name, leaders.min_member) == ("train-leaders", 3)
    assert (followers.name, followers.min_member) == ("train-followers", 9)
    # the node-selector strategy creates every pod at once: one gang
    selector = {"alpha.jobset.sigs.k8s.io/node-selector": "true"}
    whole = jobset_gang(js, pod("3", **selector), replicated_job="w", restart_attempt="0")
    assert isinstance(whole, WorkloadGang)
    assert (whole.name, whole.min_member) == ("train", 12)


def test_depends_on_splits_a_trainjobs_initializers_from_its_nodes() -> None:
    """Kubeflow Trainer's runtimes: dataset-initializer, then model-initializer, then node."""
    js = jobset(
        rjob("dataset-initializer"),
        rjob(
            "model-initializer",
            dependsOn=[{"name": "dataset-initializer", "status": "Complete"}],
        ),
        rjob(
            "node",
            replicas=1,
            parallelism=4,
            job={"completions": 4},
            dependsOn=[{"name": "model-initializer", "status": "Complete"}],
        ),
    )
    node = jobset_gang(js, POD, replicated_job="node", restart_attempt="0")
    assert isinstance(node, WorkloadGang)
    assert (node.name, node.min_member) == ("train-node", 4)


def test_gang_min_on_the_jobset_sets_the_minimum_and_more_than_its_pods_is_refused() -> None:
    js = jobset(rjob("w", replicas=8), labels={"topos.io/gang-min": "5"})
    gang = jobset_gang(js, POD, replicated_job="w", restart_attempt="0")
    assert isinstance(gang, WorkloadGang)
    assert gang.min_member == 5
    # 50 of 8 pods would never gather: refused, naming the JobSet, the key and the value (as on
    # a Job), not quietly lowered to 8
    js = jobset(rjob("w", replicas=8), labels={"topos.io/gang-min": "50"})
    bad = jobset_gang(js, POD, replicated_job="w", restart_attempt="0")
    assert isinstance(bad, WorkloadGangError)
    assert bad.text == (
        "JobSet ml/train metadata.labels[topos.io/gang-min]: the group would wait for ever: "
        "JobSet ml/train runs at most 8 pod(s) at once, got '50'"
    )


def test_gang_min_not_a_number_names_the_jobset_key_and_value() -> None:
    js = jobset(rjob("w", replicas=8), labels={"topos.io/gang-min": "two"})
    bad = jobset_gang(js, POD, replicated_job="w", restart_attempt="0")
    assert isinstance(bad, WorkloadGangError)
    assert bad.gang == "train"
    assert bad.text == (
        "JobSet ml/train metadata.labels[topos.io/gang-min]: "
        "must be a whole number from 1 to 10000, got 'two'"
    )


@pytest.mark.parametrize("where", ["workload", "pod"])
def test_opt_out_label_on_the_workload_or_the_pod(where: str) -> None:
    js = jobset(rjob("w", replicas=8))
    pod: dict[str, Any] = {"metadata": {"name": "p"}}
    meta = js["metadata"] if where == "workload" else pod["metadata"]
    meta["labels"] = {"topos.io/gang-opt-out": "true"}
    assert jobset_gang(js, pod, replicated_job="w", restart_attempt="0") is None
    meta["labels"] = {"topos.io/gang-opt-out": "maybe"}
    bad = jobset_gang(js, pod, replicated_job="w", restart_attempt="0")
    assert isinstance(bad, WorkloadGangError)
    assert "got 'maybe'" in bad.text


def lws(size: int = 4, **spec: Any) -> Any:
    template = {"size": size}
    return {
        "metadata": {"name": "vllm", "namespace": "ml", "uid": "lws-1"},
        "spec": {"leaderWorkerTemplate": template, **spec},
    }


def lws_pod(worker: int, size: str = "4", **annotations: str) -> Any:
    return {
        "metadata": {
            "name": f"vllm-1-{worker}" if worker else "vllm-1",
            "namespace": "ml",
            "uid": f"pod-{worker}",
            "labels": {
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "1",
                "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
            },
            "annotations": {"leaderworkerset.sigs.k8s.io/size": size, **annotations},
        }
    }


def test_an_lws_group_is_one_gang_and_its_run_is_the_leader() -> None:
    leader = lws_gang(lws(), lws_pod(0), leader_uid="pod-0")
    worker = lws_gang(lws(), lws_pod(3), leader_uid="pod-0")
    assert leader == worker == WorkloadGang("LeaderWorkerSet", "vllm", "vllm-1", 4, "pod-0")


def test_lws_workers_made_after_the_leader_is_placed_are_the_gang_alone() -> None:
    exclusive = {"leaderworkerset.sigs.k8s.io/exclusive-topology": "topos.io/leaf"}
    assert lws_gang(lws(), lws_pod(0, **exclusive), leader_uid="pod-0") is None
    workers = lws_gang(lws(), lws_pod(1, **exclusive), leader_uid="pod-0")
    assert isinstance(workers, WorkloadGang)
    assert (workers.name, workers.min_member) == ("vllm-1-workers", 3)
    ready = lws(startupPolicy="LeaderReady")
    assert lws_gang(ready, lws_pod(0), leader_uid="pod-0") is None


@pytest.mark.parametrize("size", ["0", "four", "-2"])
def test_an_unusable_lws_size_names_the_annotation_and_value(size: str) -> None:
    bad = lws_gang(lws(), lws_pod(1, size=size), leader_uid="pod-0")
    assert isinstance(bad, WorkloadGangError)
    assert bad.gang == "vllm-1"
    assert bad.text.startswith("pod metadata.annotations[leaderworkerset.sigs.k8s.io/size]: ")
    assert repr(size) in bad.text


def raycluster(*groups: dict[str, Any]) -> Any:
    return {
        "metadata": {"name": "rc", "namespace": "ml", "uid": "rc-1"},
        "spec": {"headGroupSpec": {}, "workerGroupSpecs": list(groups)},
    }


def test_a_rayclusters_gang_is_the_head_and_each_groups_minimum() -> None:
    rc = raycluster(
        {"groupName": "a", "replicas": 3, "minReplicas": 2},
        {"groupName": "tpu", "replicas": 1, "minReplicas": 1, "numOfHosts": 4},
        {"groupName": "off", "replicas": 5, "minReplicas": 5, "suspend": True},
    )
    assert raycluster_gang(rc, POD) == WorkloadGang("RayCluster", "rc", "rc", 1 + 2 + 4, "rc-1")
    assert raycluster_gang(raycluster({"groupName": "a", "minReplicas": 0}), POD) is None


def test_the_gang_labels_a_workload_pod_gets_and_how_they_read() -> None:
    gang = WorkloadGang("LeaderWorkerSet", "vllm", "vllm-1", 4, "pod-0")
    pod = lws_pod(2)
    change = inheritance(
        pod["metadata"]["annotations"],
        pod["metadata"]["labels"],
        None,
        workload_pod=True,
        workload_gang=gang,
    )
    assert change is not None
    assert change.labels == {
        "topos.io/gang": "vllm-1",
        "topos.io/gang-min": "4",
        "topos.io/gang-run": "pod-0",
    }
    pod["metadata"]["labels"].update(change.labels)
    spec = gang_instance_of(pod)
    assert isinstance(spec, GangSpec)
    assert (spec.key.name, spec.key.uid, spec.min_member) == ("vllm-1", "pod-0", 4)
    # written: nothing more to do; opted out later: the marks go
    assert (
        inheritance(
            pod["metadata"]["annotations"],
            pod["metadata"]["labels"],
            None,
            workload_pod=True,
            workload_gang=gang,
        )
        is None
    )
    change = inheritance(
        pod["metadata"]["annotations"], pod["metadata"]["labels"], None, workload_pod=True
    )
    assert change is not None
    assert change.labels == dict.fromkeys(
        ("topos.io/gang", "topos.io/gang-min", "topos.io/gang-run")
    )


def test_a_pod_naming_its_own_group_keeps_it() -> None:
    pod = lws_pod(2)
    pod["metadata"]["labels"]["topos.io/gang"] = "mine"
    gang = WorkloadGang("LeaderWorkerSet", "vllm", "vllm-1", 4, "pod-0")
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert inheritance(annotations, labels, None, workload_pod=True, workload_gang=gang) is None


def test_a_workload_error_reaches_the_pod_as_a_gang_problem() -> None:
    bad = WorkloadGangError(
        "train", "JobSet ml/train metadata.labels[topos.io/gang-min]", "got 'two'"
    )
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml", "labels": {}}}
    change = inheritance({}, {}, None, workload_pod=True, workload_gang=bad)
    assert change is not None
    pod["metadata"]["labels"] = {k: v for k, v in change.labels.items() if v is not None}
    pod["metadata"]["annotations"] = {k: v for k, v in change.annotations.items() if v is not None}
    problem = gang_instance_of(pod)
    assert isinstance(problem, GangProblem)
    assert not problem.waiting
    assert problem.message == (
        "invalid JobSet ml/train metadata.labels[topos.io/gang-min]: got 'two'"
    )
    assert problem.key is not None
    assert problem.key.name == "train"


def test_a_jobset_restart_attempt_is_a_new_run_for_labels_users_wrote_too() -> None:
    def member(attempt: str) -> Any:
        labels = {
            "topos.io/gang": "train",
            "topos.io/gang-min": "2",
            "jobset.sigs.k8s.io/jobset-uid": "js-1",
            "jobset.sigs.k8s.io/restart-attempt": attempt,
        }
        return {"metadata": {"name": "p", "namespace": "ml", "labels": labels}}

    first, second = gang_instance_of(member("0")), gang_instance_of(member("1"))
    assert isinstance(first, GangSpec)
    assert isinstance(second, GangSpec)
    assert (first.key.uid, second.key.uid) == ("js-1-0", "js-1-1")
