"""Which workload a pod's controller chain names, and whose annotations win."""

from __future__ import annotations

from coordinator.adapters.kube.owners import owner_of


def _obj(name: str, annotations: dict[str, str], spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def test_a_replicasets_deployment_names_the_workload_and_the_replicaset_keys_win() -> None:
    rs = _obj("web-7f9", {"topos.io/placement": "distributed"}, {"replicas": 2})
    deploy = _obj(
        "web",
        {"topos.io/placement": "consolidated", "topology.scheduler/latency-sensitive": "true"},
        {"replicas": 3},
    )
    owner = owner_of([("ReplicaSet", rs), ("Deployment", deploy)])
    # replicas come one at a time (rollouts, scale-ups): the group's minimum is 1, not 3
    assert (owner.kind, owner.name, owner.pods) == ("Deployment", "web", 1)
    assert owner.annotations["topos.io/placement"] == "distributed"
    assert owner.annotations["topology.scheduler/latency-sensitive"] == "true"


def test_a_jobs_pods_at_once_are_its_parallelism_capped_by_completions() -> None:
    assert owner_of([("Job", _obj("j", {}, {"parallelism": 4, "completions": 4}))]).pods == 4
    assert owner_of([("Job", _obj("j", {}, {"parallelism": 8, "completions": 2}))]).pods == 2
    assert owner_of([("Job", _obj("j", {}, {"completions": 5}))]).pods == 1
    assert owner_of([("StatefulSet", _obj("s", {}, {}))]).pods == 1
