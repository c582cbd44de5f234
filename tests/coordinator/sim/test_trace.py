"""Trace files: CSV and JSON Lines read the same jobs, defaults are filled in, and every kind of
bad row is refused with the file, line and field named."""

from __future__ import annotations

import pytest

from coordinator.sim import Job, TraceError, dump_csv, dump_jsonl, parse_trace
from coordinator.sim.pods import job_manifests, job_pods

HEADER = "job_id,arrival_s,duration_s,gpus,gpu_type,gang_size,priority,mig_profile,cpu,memory_gib"
CSV = f"""{HEADER},numa_policy
train-1,10,3600,8,H100,4,100,,,,
infer-1,0,600,1,,1,1000,1g.5gb,,,
hpc-1,5,1200,2,,,,,6,48,single-numa
"""


def test_csv_and_jsonl_give_the_same_jobs_sorted_by_arrival() -> None:
    jobs = parse_trace(CSV, name="t.csv")
    assert [j.job_id for j in jobs] == ["infer-1", "hpc-1", "train-1"]
    again = parse_trace(dump_jsonl(jobs), name="t.jsonl")
    assert again == jobs
    assert parse_trace(dump_csv(jobs), name="t.csv") == jobs


def test_defaults_and_derived_requests() -> None:
    jobs = {j.job_id: j for j in parse_trace(CSV, name="t.csv")}
    train, infer, hpc = jobs["train-1"], jobs["infer-1"], jobs["hpc-1"]
    assert (train.gang_size, train.gpu_type, train.kind) == (4, "H100", "gang")
    assert train.cpu_per_pod == 64
    assert train.memory_gib_per_pod == 512
    assert (infer.kind, infer.whole_gpus, infer.cpu_per_pod) == ("mig", 0, 2.0)
    assert (hpc.gang_size, hpc.priority, hpc.cpu_per_pod, hpc.numa_policy) == (
        1,
        0,
        6.0,
        "single-numa",
    )


def test_a_share_asks_by_annotation_and_no_whole_gpu() -> None:
    text = "job_id,arrival_s,duration_s,cpu,memory_gib,gpu_fraction\ns,0,5,4,29.801758,0.47\n"
    (share,) = parse_trace(text, name="t.csv")
    assert (share.gpu_fraction, share.gpus, share.whole_gpus, share.gpu_milli) == (0.47, 1, 0, 470)
    assert parse_trace(dump_csv([share]), name="t.csv") == [share]
    assert parse_trace(dump_jsonl([share]), name="t.jsonl") == [share]
    (pod,) = job_pods(share)
    assert pod.share is not None
    assert pod.share.milli == 470
    assert (pod.gpus, pod.requests["cpu"], pod.requests["memory"]) == (0, 4000, 30517 * 2**20)
    (manifest,) = job_manifests(share)
    assert manifest["metadata"]["annotations"] == {"topos.io/gpu-fraction": "0.47"}
    assert manifest["spec"]["containers"][0]["resources"]["limits"] == {}
    whole = Job(job_id="w", arrival_s=0, duration_s=5)
    assert (whole.gpu_fraction, whole.gpu_milli, whole.row()["gpu_fraction"]) == (None, 1000, "")


def test_minimal_jsonl_with_only_required_keys() -> None:
    jobs = parse_trace('{"job_id":"a","arrival_s":0,"duration_s":5}\n', name="x.jsonl")
    assert jobs == [Job(job_id="a", arrival_s=0.0, duration_s=5.0)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_id,arrival_s,duration_s\na,0,-5\n", "line 2: duration_s '-5' must be a finite"),
        ("job_id,arrival_s,duration_s\na,0,0\n", "line 2: duration_s 0 must be positive"),
        ("job_id,arrival_s,duration_s\na,x,5\n", "line 2: arrival_s 'x' is not a number"),
        ("job_id,arrival_s,duration_s,gpus\na,0,5,1.5\n", "gpus '1.5' is not a whole number"),
        ("job_id,arrival_s,duration_s,gpus\na,0,5,-1\n", "gpus -1 is out of range"),
        ("job_id,arrival_s,duration_s,gang_size\na,0,5,0\n", "gang_size 0 is out of range"),
        ("job_id,arrival_s,duration_s\na,0,5\na,1,5\n", "line 3: job_id 'a' already used"),
        ("job_id,arrival_s,duration_s,color\na,0,5,red\n", "unknown column 'color'"),
        ("job_id,arrival_s\na,0\n", "lacks column 'duration_s'"),
        ("job_id,arrival_s,duration_s\na,0,5,extra\n", "more fields than the header"),
        ("job_id,arrival_s,duration_s,mig_profile\na,0,5,big\n", "'big' is not a MIG profile"),
        (
            "job_id,arrival_s,duration_s,numa_policy\na,0,5,tight\n",
            "numa_policy 'tight' must be one of",
        ),
        ("job_id,arrival_s,duration_s\nbad id,0,5\n", "job_id 'bad id' must be"),
        ("job_id,arrival_s,duration_s\n", "the trace has no jobs"),
        ("job_id,arrival_s,duration_s,gpus,mig_profile\na,0,5,0,1g.5gb\n", "with mig_profile"),
        ("job_id,arrival_s,duration_s\na,nan,5\n", "arrival_s 'nan' must be a finite number"),
        ("job_id,arrival_s,duration_s,gpu_fraction\na,0,5,1.5\n", "gpu_fraction 1.5 must be in"),
        ("job_id,arrival_s,duration_s,gpu_fraction\na,0,5,0\n", "gpu_fraction 0 must be in"),
        ("job_id,arrival_s,duration_s,gpu_fraction\na,0,5,half\n", "'half' is not a number"),
        ("job_id,arrival_s,duration_s,gpus,gpu_fraction\na,0,5,2,0.5\n", "gpus 2 must be 1"),
        (
            "job_id,arrival_s,duration_s,mig_profile,gpu_fraction\na,0,5,1g.5gb,0.5\n",
            "gpu_fraction and mig_profile exclude each other",
        ),
    ],
)
def test_bad_csv_rows_are_refused_with_line_and_field(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=r"t\.csv") as err:
        parse_trace(text, name="t.csv")
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"job_id":"a","arrival_s":0,"duration_s":5}\n{oops\n', "line 2: not valid JSON"),
        ("[1,2]\n", "line 1: expected a JSON object, got list"),
        ('{"job_id":"a","arrival_s":0,"duration_s":{"x":1}}\n', "duration_s must be a string"),
        ('{"job_id":"a","arrival_s":0}\n', "duration_s is required"),
    ],
)
def test_bad_jsonl_lines_are_refused(text: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        parse_trace(text, name="t.jsonl")
    assert message in str(err.value)
