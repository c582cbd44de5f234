"""``topos simulate`` as a user runs it: the example files replay under all policies with a
readable table or JSON, ``--generate`` writes a trace that replays, and mistakes (bad baseline
name, unknown profile, broken trace) end with one clear line and a non-zero status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = str(ROOT / "examples" / "cluster-small.yaml")
TRACE = str(ROOT / "examples" / "trace-small.csv")


def test_example_replays_under_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--baseline", "all"]) == 0
    out = capsys.readouterr().out
    assert "Cluster small-lab: 16 nodes, 112 GPUs, 6 MIG instances, 4 leaves / 2 spines" in out
    for heading in ("Job time", "GPU use", "Locality"):
        assert heading in out
    rows = [line.split()[0] for line in out.splitlines() if line.split()[:1]]
    for policy in ("topos", "spread", "firstfit"):
        assert rows.count(policy) == 5  # its description, then one row per block


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--baseline", "spread", "--json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in doc["policies"]] == ["topos", "spread"]
    topos = doc["policies"][0]
    assert topos["jobs"] == 200
    assert topos["placed"] + topos["unplaced"] == 200
    assert 0 < topos["utilisation"] <= 1
    assert len(topos["timeline"]) == 10
    assert doc["costModel"]["link"]["SYS"] == 1.4
    assert doc["cluster"]["gpus"] == 112


def test_generate_then_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    argv = ["simulate", "--cluster", CLUSTER, "--generate", "40", "--seed", "5", "-o", str(trace)]
    assert main(argv) == 0
    assert len(trace.read_text().splitlines()) == 40
    assert main(["simulate", "--cluster", CLUSTER, "--trace", str(trace)]) == 0
    assert "40 jobs" in capsys.readouterr().out


def test_cluster_with_profile_file_relative_to_it(tmp_path: Path) -> None:
    profile = ROOT / "agent" / "devices" / "profiles" / "ws-4x-nvlink.yaml"
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "box.yaml").write_text(profile.read_text())
    (tmp_path / "c.yaml").write_text("nodes: [{profile: hw/box.yaml, count: 2}]\n")
    (tmp_path / "t.csv").write_text("job_id,arrival_s,duration_s,gpus\na,0,60,2\n")
    argv = ["simulate", "--cluster", str(tmp_path / "c.yaml"), "--trace", str(tmp_path / "t.csv")]
    assert main(argv) == 0


@pytest.mark.parametrize(
    ("files", "extra", "message"),
    [
        ({}, ["--baseline", "random"], "--baseline 'random': unknown policy"),
        ({"c.yaml": "nodes: [{profile: dgx-h200}]"}, [], "unknown profile 'dgx-h200'"),
        ({"c.yaml": "nodes: [{profile: dgx-h100, count: -1}]"}, [], "count must be"),
        ({"t.csv": "job_id,arrival_s,duration_s\nx,0,oops\n"}, [], "t.csv line 2: duration_s"),
        ({"t.csv": b"\xff\xfe"}, [], "is not UTF-8"),
    ],
)
def test_mistakes_end_with_one_clear_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str | bytes],
    extra: list[str],
    message: str,
) -> None:
    cluster, trace = CLUSTER, TRACE
    for name, content in files.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        if name.endswith(".yaml"):
            cluster = str(path)
        else:
            trace = str(path)
    assert main(["simulate", "--cluster", cluster, "--trace", trace, *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("topos: ")
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_missing_trace_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cluster", CLUSTER, "--trace", "/nonexistent/t.csv"]) == 1
    assert "cannot read trace /nonexistent/t.csv" in capsys.readouterr().err


def test_json_lists_jobs_that_never_ran_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,arrival_s,duration_s,gpus,gpu_type\nok,0,60,1,\nb200,0,60,1,B200\n")
    assert main(["simulate", "--cluster", CLUSTER, "--trace", str(trace), "--json"]) == 0
    topos = json.loads(capsys.readouterr().out)["policies"][0]
    assert topos["placed"] == 1
    assert [u["job_id"] for u in topos["unplaced_jobs"]] == ["b200"]
    assert "didn't match Pod's node affinity/selector" in topos["unplaced_jobs"][0]["reason"]
