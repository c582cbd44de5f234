"""Expanding a manifest into the pods its controllers would make (``coordinator.core.expand``):
counts, names and the labels JobSet v0.10.1, LWS v0.7.0 and the Job controller put on pods; the
keys a pod inherits from its Job; PodGroups kept for their members; AgentPools through the
NeuroNetes template; and bad documents named by key and value."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.expand import ExpandError, expand
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.neuronetes.decide.preview import AGENT_POOL, pool_pods


def _template(gpus: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": meta,
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
            ]
        },
    }


def _job(name: str, parallelism: int | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"template": _template(), **spec}
    if parallelism is not None:
        body["parallelism"] = parallelism
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": body}


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"]["labels"])


def test_a_job_makes_min_of_parallelism_and_completions_pods() -> None:
    out = expand([_job("a", 4, completions=3, completionMode="Indexed"), _job("b")])
    names = [p["metadata"]["name"] for p in out.pods]
    assert names == ["a-0", "a-1", "a-2", "b-0"]
    first = out.pods[0]
    assert first["metadata"]["namespace"] == "default"
    assert _labels(first)["batch.kubernetes.io/job-name"] == "a"
    assert _labels(first)["batch.kubernetes.io/job-completion-index"] == "0"
    assert first["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "0"
    assert "batch.kubernetes.io/job-completion-index" not in _labels(out.pods[3])  # NonIndexed
    assert first["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert [(w.kind, w.name, len(w.pods)) for w in out.workloads] == [
        ("Job", "a", 3),
        ("Job", "b", 1),
    ]
    # every pod parses, with a uid of its own
    requests = [parse_pod(p) for p in out.pods]
    assert all(isinstance(r, PodRequest) for r in requests)
    assert len({r.uid for r in requests if isinstance(r, PodRequest)}) == 4


def test_a_job_asking_for_a_placement_makes_one_pod_group() -> None:
    job = _job("train", 3)
    job["metadata"]["annotations"] = {"topos.io/placement": "consolidated"}
    out = expand([job])
    for pod in out.pods:
        assert _labels(pod)["topos.io/gang"] == "train"
        assert _labels(pod)["topos.io/gang-min"] == "3"
        assert pod["metadata"]["annotations"]["topos.io/placement"] == "consolidated"
        assert pod["metadata"]["annotations"]["topos.io/inherited"] == (
            "topos.io/gang,topos.io/gang-min,topos.io/placement"
        )


def test_a_group_declared_on_the_job_itself_reaches_its_pods_as_in_the_cluster() -> None:
    """What-if of the playground trial: the group label and minimum on the Job's own metadata
    make its pods one gang of 3, as the kube adapter writes them; a bad minimum is named."""
    job = _job("trial", 3)
    job["metadata"]["labels"] = {"topos.io/gang": "onjob"}
    job["metadata"]["annotations"] = {"topos.io/gang-min": "3"}
    for pod in expand([job]).pods:
        assert _labels(pod)["topos.io/gang"] == "onjob"
        assert _labels(pod)["topos.io/gang-min"] == "3"
    job["metadata"]["annotations"] = {"topos.io/gang-min": "4"}
    refused = parse_pod(expand([job]).pods[0])
    assert not isinstance(refused, PodRequest)
    assert "Job default/trial metadata.annotations[topos.io/gang-min]" in str(refused)
    assert "runs at most 3 pod(s) at once, got '4'" in str(refused)


def test_a_jobset_makes_its_jobs_pods_with_jobsets_labels() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "template": {"spec": {"template": _template(0)}}},
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": _template(8)}},
                },
            ]
        },
    }
    out = expand([jobset])
    names = [p["metadata"]["name"] for p in out.pods]
    assert names == [
        "js-leader-0-0",
        "js-workers-0-0",
        "js-workers-0-1",
        "js-workers-1-0",
        "js-workers-1-1",
    ]
    worker = _labels(out.pods[4])
    assert worker["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert worker["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert worker["jobset.sigs.k8s.io/replicatedjob-replicas"] == "2"
    assert worker["jobset.sigs.k8s.io/job-index"] == "1"
    assert worker["jobset.sigs.k8s.io/job-global-index"] == "2"  # after the leader's one job
    assert worker["jobset.sigs.k8s.io/global-replicas"] == "3"
    assert worker["jobset.sigs.k8s.io/group-name"] == "default"
    assert worker["jobset.sigs.k8s.io/group-replicas"] == "3"
    assert worker["jobset.sigs.k8s.io/job-group-index"] == "2"
    assert worker["jobset.sigs.k8s.io/restart-attempt"] == "0"
    assert worker["batch.kubernetes.io/job-name"] == "js-workers-1"
    assert worker["batch.kubernetes.io/job-completion-index"] == "1"  # JobSet: Indexed
    # one JobSet: every pod names the same JobSet uid (one workload for the gangs)
    assert len({_labels(p)["jobset.sigs.k8s.io/jobset-uid"] for p in out.pods}) == 1
    assert out.workloads[0].pods[0] == "ml/js-leader-0-0"


def test_jobset_and_lws_pods_carry_their_workloads_gang_as_in_the_cluster() -> None:
    """The kube adapter labels a JobSet's and an LWS group's pods as one gang
    (core/podspec/workloadgangs.py): what-if's pods carry the same, or it would place them one
    by one where the scheduler waits for all of them."""
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": _template(8)}},
                },
            ]
        },
    }
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "ml"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": _template()}},
    }
    own = {**jobset, "metadata": {"name": "own", "namespace": "ml"}}
    own["spec"] = {
        "replicatedJobs": [
            {
                "name": "w",
                "replicas": 2,
                "template": {"spec": {"template": _template(1, labels={"topos.io/gang": "mine"})}},
            }
        ]
    }
    out = expand([jobset, lws, own])
    gangs = [
        (_labels(p).get("topos.io/gang"), _labels(p).get("topos.io/gang-min")) for p in out.pods
    ]
    assert (
        gangs
        == [("js", "4")] * 4
        + [("vllm-0", "3")] * 3
        + [("vllm-1", "3")] * 3
        + [
            ("mine", None)  # a group of the pod's own wins
        ]
        * 2
    )
    runs = {_labels(p)["topos.io/gang-run"] for p in out.pods[:4]}
    assert len(runs) == 1  # one run of the JobSet


def test_a_leaderworkerset_makes_groups_of_a_leader_and_workers() -> None:
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 3,
                "leaderTemplate": _template(0),
                "workerTemplate": _template(8),
            },
        },
    }
    out = expand([lws])
    names = [p["metadata"]["name"] for p in out.pods]
    assert names == ["vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"]
    leader, worker = out.pods[3], out.pods[5]
    assert _labels(leader)["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert _labels(worker)["leaderworkerset.sigs.k8s.io/worker-index"] == "2"
    assert _labels(worker)["leaderworkerset.sigs.k8s.io/group-index"] == "1"
    assert (
        _labels(worker)["leaderworkerset.sigs.k8s.io/group-key"]
        == _labels(leader)["leaderworkerset.sigs.k8s.io/group-key"]
    )
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"] == "vllm-1"
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "3"
    gpus = [p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for p in out.pods]
    assert gpus == [0, 8, 8, 0, 8, 8]  # the leader from leaderTemplate


def test_podgroups_are_kept_for_their_members_and_lists_are_unpacked() -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ml"},
        "spec": {"minMember": 2},
    }
    workload_group = {**group, "apiVersion": "scheduling.k8s.io/v1alpha2"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}}
    pod["spec"] = _template()["spec"]
    out = expand([{"apiVersion": "v1", "kind": "List", "items": [group, workload_group, pod]}])
    assert set(out.podgroups) == {("ml", "pg"), ("ml", "scheduling.k8s.io/pg")}
    assert [p["metadata"]["name"] for p in out.pods] == ["p"]


def test_an_agentpool_through_its_controllers_template() -> None:
    api, kind = AGENT_POOL
    pool = {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": "chat", "namespace": "agents"},
        "spec": {
            "replicas": 2,
            "gpuRequirements": {"count": 2},
            "scheduling": {"priority": 500, "gangScheduling": {"enabled": True, "minMembers": 2}},
        },
    }
    out = expand([pool], extra={kind: (api, pool_pods)})
    assert [p["metadata"]["name"] for p in out.pods] == ["chat-0", "chat-1"]
    first = out.pods[0]
    assert first["spec"]["schedulerName"] == "topos-agentpools"
    assert first["spec"]["priority"] == 500
    assert _labels(first)["topos.io/gang"] == "chat"
    assert first["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
            "documents[0]: kind: cannot expand apiVersion 'apps/v1' kind 'Deployment' (known: "
            "v1 Pod, batch/v1 Job, jobset.x-k8s.io/v1alpha2 JobSet, leaderworkerset.x-k8s.io/v1 "
            "LeaderWorkerSet, scheduling.x-k8s.io/v1alpha1 PodGroup, scheduling.k8s.io/v1alpha2 "
            "PodGroup, v1 List)",
        ),
        ("just text", "documents[0]: (document): must be a mapping, not 'just text'"),
        (
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}},
            "documents[0]: metadata.name: is required, got None",
        ),
        (
            {**_job("j"), "spec": {"parallelism": -1, "template": _template()}},
            "Job default/j: spec.parallelism: must be a whole number of at least 0, not -1",
        ),
        (
            {**_job("j"), "spec": {"template": _template(), "completionMode": "Sometimes"}},
            "Job default/j: spec.completionMode: must be Indexed or NonIndexed, not 'Sometimes'",
        ),
        (
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": "l"},
                "spec": {"leaderWorkerTemplate": {"size": 0, "workerTemplate": _template()}},
            },
            "LeaderWorkerSet default/l: spec.leaderWorkerTemplate.size: must be a whole number "
            "of at least 1, not 0",
        ),
        (
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "s"},
                "spec": {"replicatedJobs": [{"name": "w", "replicas": "2", "template": {}}]},
            },
            "JobSet default/s spec.replicatedJobs[0]: replicas: must be a whole number of at "
            "least 0, not '2'",
        ),
    ],
)
def test_bad_documents_are_named_by_key_and_value(document: object, message: str) -> None:
    with pytest.raises(ExpandError) as caught:
        expand([document])
    assert str(caught.value) == message


def test_too_many_pods_and_the_same_pod_twice_are_refused() -> None:
    with pytest.raises(ExpandError, match="expand to more than 10 pods"):
        expand([_job("big", 11)], max_pods=10)
    with pytest.raises(ExpandError, match="pod default/twice-0 would be made twice"):
        expand([_job("twice"), _job("twice")])


def test_keys_written_on_a_jobset_or_lws_reach_their_pods_as_in_the_cluster() -> None:
    """Users write Topos keys on the workload they apply: the kube adapter passes a JobSet's or
    LWS's keys on to its pods (a Job's own winning), and what-if's pods carry the same."""
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "js",
            "namespace": "ml",
            "annotations": {"topos.io/gpu-locality": "nvlink", "topos.io/numa-policy": "single"},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "metadata": {"annotations": {"topos.io/numa-policy": "preferred"}},
                        "spec": {"parallelism": 2, "template": _template(8)},
                    },
                },
            ]
        },
    }
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "vllm",
            "namespace": "ml",
            "annotations": {"topos.io/gpu-locality": "nvlink"},
        },
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": _template()}},
    }
    out = expand([jobset, lws])
    annotations = [p["metadata"]["annotations"] for p in out.pods]
    assert [a.get("topos.io/gpu-locality") for a in annotations] == ["nvlink"] * 4
    assert [a.get("topos.io/numa-policy") for a in annotations[:2]] == ["preferred"] * 2
