"""The Kueue admission benchmark's stream and objects (the runs themselves need the playground):
the same seed gives the same stream, every workload is a gang of 2–16 pods × 1/2/4/8 GPUs within
64 GPUs, Jobs and JobSets for both teams, some asking NVLink or NUMA; the TAS arm's templates ask
Kueue for a leaf, the check arm's ClusterQueues ask Topos's check."""

from __future__ import annotations

from benchmarks.kueue_admission import (
    CHECKS,
    CLUSTER_QUEUES,
    TOPOLOGIES,
    queue_objects,
    stream,
    workload_object,
)


def test_the_stream_is_seeded_and_its_gangs_are_in_range() -> None:
    specs = stream(7, 24, 30.0)
    assert specs == stream(7, 24, 30.0)
    assert specs != stream(8, 24, 30.0)
    assert all(2 <= s.pods <= 16 and s.gpus in (1, 2, 4, 8) for s in specs)
    assert all(s.total_gpus <= 64 and 0 <= s.at <= 30.0 for s in specs)
    assert {s.kind for s in specs} == {"job", "jobset"}
    assert {s.team for s in specs} == {"team-a", "team-b"}
    assert any(s.nvlink for s in specs)
    assert any(s.numa for s in specs)


def test_each_arm_asks_kueue_as_it_should() -> None:
    spec = next(s for s in stream(7, 24, 30.0) if s.kind == "jobset")
    _, quota = workload_object(spec, "quota")
    _, tas = workload_object(spec, "tas")
    template = tas["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert any(k.startswith("kueue.x-k8s.io/podset-") for k in template["metadata"]["annotations"])
    plain = quota["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in plain["metadata"]["annotations"])
    assert template["spec"]["schedulerName"] == "topos"
    kinds = {
        arm: [r for r, _ in queue_objects(arm, f"kb-{arm}", 128)]
        for arm in ("quota", "tas", "check")
    }
    assert TOPOLOGIES in kinds["tas"]
    assert TOPOLOGIES not in kinds["quota"]
    assert CHECKS in kinds["check"]
    assert CHECKS not in kinds["tas"]
    queues = [b for r, b in queue_objects("check", "kb-check", 128) if r is CLUSTER_QUEUES]
    assert len(queues) == 2
    assert {q["spec"]["cohortName"] for q in queues} == {"kb-check"}
    assert all(q["spec"]["admissionChecksStrategy"] for q in queues)
