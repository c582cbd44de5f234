"""How the owner caches find a pod's JobSet, LWS or RayCluster (adapters/kube/owners.py): a type
the API server does not serve leaves the pod as it is; one served but not cached (yet) holds the
pod; an LWS worker's run is its leader's UID, through the worker StatefulSet the leader owns."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

from common.kube import KubeClient, Unreachable
from coordinator.adapters.kube.owners import InheritingPending, Owners
from coordinator.core.podspec.workloadgangs import WorkloadGang
from coordinator.core.queue import SchedulingQueue


def owners() -> Owners:
    return Owners(cast(KubeClient, None), namespace="ml")  # nothing here talks to a server


def jobset_pod(uid: str = "js-1") -> dict[str, Any]:
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "train",
        "jobset.sigs.k8s.io/jobset-uid": uid,
        "jobset.sigs.k8s.io/replicatedjob-name": "w",
        "jobset.sigs.k8s.io/restart-attempt": "2",
    }
    return {"metadata": {"name": "train-w-0-0", "namespace": "ml", "labels": labels}}


JOBSET = {
    "metadata": {"name": "train", "namespace": "ml", "uid": "js-1"},
    "spec": {"replicatedJobs": [{"name": "w", "replicas": 4, "template": {"spec": {}}}]},
}


def test_a_jobset_pod_where_jobsets_are_not_served_is_left_as_it_is() -> None:
    found = owners()
    found.workloads["JobSet"].reflector.installed = False
    assert found.workload_gang(jobset_pod()) == (False, None)


def test_a_jobset_pod_waits_for_its_jobset_of_that_uid() -> None:
    found = owners()
    assert found.workload_gang(jobset_pod()) is False  # served, not cached yet
    found.workloads["JobSet"].objects[("ml", "train")] = JOBSET
    assert found.workload_gang(jobset_pod(uid="js-0")) is False  # an older JobSet's pod
    assert found.workload_gang(jobset_pod()) == (
        True,
        WorkloadGang("JobSet", "train", "train", 4, "js-1-2"),
    )


def test_an_lws_workers_run_is_its_leaders_uid() -> None:
    found = owners()
    found.workloads["LeaderWorkerSet"].objects[("ml", "vllm")] = {
        "metadata": {"name": "vllm", "namespace": "ml", "uid": "lws-1"},
        "spec": {"leaderWorkerTemplate": {"size": 2}},
    }
    sts_ref = {"kind": "StatefulSet", "name": "vllm-0", "uid": "sts-1", "controller": True}
    worker = {
        "metadata": {
            "name": "vllm-0-1",
            "namespace": "ml",
            "uid": "w-1",
            "labels": {
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
                "leaderworkerset.sigs.k8s.io/worker-index": "1",
            },
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
            "ownerReferences": [sts_ref],
        }
    }
    assert found.workload_gang(worker) is False  # its StatefulSet is not cached yet
    leader_ref = {"kind": "Pod", "name": "vllm-0", "uid": "leader-1", "controller": True}
    found.caches["StatefulSet"].objects[("ml", "vllm-0")] = {
        "metadata": {"name": "vllm-0", "uid": "sts-1", "ownerReferences": [leader_ref]}
    }
    assert found.workload_gang(worker) == (
        True,
        WorkloadGang("LeaderWorkerSet", "vllm", "vllm-0", 2, "leader-1"),
    )


class _Queue:
    """The scheduling queue's side the pending-pod handler calls: what was queued."""

    def __init__(self) -> None:
        self.added: list[str] = []

    def add(self, obj: dict[str, Any]) -> None:
        self.added.append(obj["metadata"]["name"])

    def delete(self, obj: dict[str, Any], *, gone: bool) -> None:
        pass

    def replace(self, items: list[dict[str, Any]], *, scheduler_name: str | None) -> None:
        pass


class _FlakyClient:
    """A client whose first ``failures`` patches lose the connection, then succeed."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.patches: list[dict[str, Any]] = []

    async def patch(self, resource: Any, name: str, body: Any, **_: Any) -> dict[str, Any]:
        self.patches.append(body)
        if len(self.patches) <= self.failures:
            raise Unreachable(f"PATCH pods/{name}: Server disconnected")
        return {}


async def test_a_lost_connection_writing_gang_labels_is_retried_not_queued_bare() -> None:
    # Queued without its gang's labels, a JobSet's pod would be placed alone: a patch that lost
    # its connection is sent again, and the pod waits for its labels (the watch brings it back).
    found = owners()
    found.workloads["JobSet"].objects[("ml", "train")] = JOBSET
    client = _FlakyClient(failures=2)
    queue = _Queue()
    handler = InheritingPending(
        cast(KubeClient, client), cast(SchedulingQueue, queue), found, "topos"
    )
    pod = jobset_pod()
    pod["metadata"]["uid"] = "p-1"
    pod["spec"] = {"schedulerName": "topos"}
    handler.apply("ADDED", pod)
    while handler._tasks:  # the patch task the handler started
        await asyncio.gather(*handler._tasks)
    assert len(client.patches) == 3
    assert client.patches[-1]["metadata"]["labels"]["topos.io/gang"] == "train"
    assert queue.added == []  # not queued without its gang


def test_a_key_written_on_the_jobset_reaches_its_pods_behind_their_jobs_own() -> None:
    """Users write Topos keys on the workload they apply, not on the pod template: a JobSet's
    keys are its pods' too, a key on the pod's Job (nearer) winning over the JobSet's."""
    found = owners()
    annotated = copy.deepcopy(JOBSET)
    annotated["metadata"]["annotations"] = {  # type: ignore[index]
        "topos.io/slice-topology": "leaf",
        "topos.io/gpu-locality": "nvlink",
    }
    found.workloads["JobSet"].objects[("ml", "train")] = annotated
    found.caches["Job"].objects[("ml", "train-w-0")] = {
        "metadata": {
            "name": "train-w-0",
            "namespace": "ml",
            "uid": "job-1",
            "annotations": {"topos.io/gpu-locality": "same-socket"},
        },
        "spec": {"parallelism": 2, "completions": 2},
    }
    pod = jobset_pod()
    job_ref = {"kind": "Job", "name": "train-w-0", "uid": "job-1", "controller": True}
    pod["metadata"]["ownerReferences"] = [job_ref]
    owner = found.resolve(pod)
    assert not isinstance(owner, bool)
    assert owner is not None
    assert owner.annotations == {
        "topos.io/slice-topology": "leaf",
        "topos.io/gpu-locality": "same-socket",
    }
    # A RayCluster's pods (owned by the RayCluster itself, no cached kind between) too.
    found.workloads["RayCluster"].objects[("ml", "ray")] = {
        "metadata": {
            "name": "ray",
            "namespace": "ml",
            "uid": "rc-1",
            "annotations": {"topos.io/numa-policy": "single-numa"},
        },
        "spec": {},
    }
    ray_pod = {
        "metadata": {"name": "ray-head", "namespace": "ml", "labels": {"ray.io/cluster": "ray"}}
    }
    ray_owner = found.resolve(ray_pod)
    assert not isinstance(ray_owner, bool)
    assert ray_owner is not None
    assert (ray_owner.kind, ray_owner.name) == ("RayCluster", "ray")
    assert ray_owner.annotations == {"topos.io/numa-policy": "single-numa"}


def test_a_label_put_on_a_job_has_its_pending_pods_looked_at_again() -> None:
    """A group declared on the Job by label (``kubectl label job trial topos.io/gang=onjob``)
    reaches its pods not bound yet; a status update alone does not look at them again."""
    found = owners()
    heard: list[tuple[str, object]] = []
    found.listeners.append(lambda kind, key: heard.append((kind, key)))
    job = {"metadata": {"name": "trial", "namespace": "ml", "uid": "j-1"}, "spec": {}}
    cache = found.caches["Job"]
    cache.apply("ADDED", job)
    cache.apply("MODIFIED", {**job, "status": {"active": 3}})
    labelled = {**job, "metadata": {**job["metadata"], "labels": {"topos.io/gang": "onjob"}}}
    cache.apply("MODIFIED", labelled)
    assert heard == [("Job", ("ml", "trial")), ("Job", ("ml", "trial"))]
