"""``topos demo`` as a newcomer runs it: exit 0 within the run, every job placed or explained,
gangs whole and inside one leaf, MIG pods on MIG instances, NUMA-pinned pods on one NUMA node,
no GPU handed out twice, a readable report (progress on stderr, no carriage returns when not a
terminal), ``--serve`` answering ``curl``, and bad options refused with one line."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli.demo import demo
from cli.main import main
from devcluster.processes import free_port
from devcluster.subprocess_env import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
TOPOS = [sys.executable, "-m", "cli.main"]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """One in-process run with ``--json``."""
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(serve=False, port=0, json=True)
    assert asyncio.run(demo(args, out, err)) == 0
    doc: dict[str, Any] = json.loads(out.getvalue())
    doc["_stderr"] = err.getvalue()
    return doc


def jobs(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["job"]: j for j in report["jobs"]}


def test_every_job_is_placed_or_explained(report: dict[str, Any]) -> None:
    for job in report["jobs"]:
        if job["state"] in ("running", "finished"):
            assert job["placed"] == job["pods"], job["job"]
        else:
            assert job["why"], job["job"]
    oversized = jobs(report)["oversized"]
    assert oversized["state"] == "unschedulable"
    assert oversized["why"] == "0/32 nodes are available: 32 Insufficient nvidia.com/gpu."
    # …and the explain API, asked over HTTP, says the same
    assert report["explain_oversized"]["message"] == oversized["why"]


def test_gangs_are_whole_and_inside_one_leaf(report: dict[str, Any]) -> None:
    gangs = [j for j in report["jobs"] if j["kind"].startswith("gang")]
    assert len(gangs) == 5
    for gang in gangs:
        assert gang["placed"] == gang["pods"], gang["job"]
        assert gang["span"] in ("node", "leaf"), (gang["job"], gang["span"])
    assert report["gangs_one_leaf"] == report["gangs"] == 5
    by_job = jobs(report)
    # the 8-node gangs take a whole leaf; the second one waited for the first to finish and got
    # the leaf it freed
    first = {p["node"] for p in by_job["llm-pretrain"]["pod_places"]}
    second = {p["node"] for p in by_job["llm-pretrain-2"]["pod_places"]}
    assert len(first) == 8
    assert second == first
    assert by_job["llm-pretrain"]["state"] == "finished"
    assert by_job["llm-pretrain-2"]["state"] == "running"


def test_mig_pods_sit_on_mig_instances_of_their_profile(report: dict[str, Any]) -> None:
    by_job = jobs(report)
    for name, profile in (
        ("serve-1g", "1g.5gb"),
        ("embed-2g", "2g.10gb"),
        ("rerank-3g", "3g.20gb"),
    ):
        for pod in by_job[name]["pod_places"]:
            assert pod["gpus"] == []
            assert len(pod["mig"]) == 1
            assert pod["mig"][0].startswith(f"{profile} on GPU ")
            assert pod["node"].startswith(("a100mig-", "mig-"))


def test_numa_pinned_and_multi_gpu_pods(report: dict[str, Any]) -> None:
    by_job = jobs(report)
    for pod in by_job["cfd"]["pod_places"]:
        assert len(pod["gpus"]) == 2
        assert len(pod["numa"]) == 1  # single-numa: CPUs, memory and GPUs from one NUMA node
    for pod in by_job["vision"]["pod_places"]:  # gpu-locality: nvlink
        assert pod["link"] == "NVSwitch"
    for pod in by_job["render"]["pod_places"]:  # L40S pairs: one PCIe switch
        assert pod["node"].startswith("l40s-")
        assert pod["link"] == "PIX"
    assert report["best_link_pods"] == report["multi_gpu_pods"] > 0


def test_no_gpu_or_mig_instance_is_handed_out_twice(report: dict[str, Any]) -> None:
    held: Counter[tuple[str, str]] = Counter()
    shared: Counter[tuple[str, str]] = Counter()  # (node, gpu) → thousandths held in parts
    busy = 0
    for job in report["jobs"]:
        for pod in job["pod_places"]:
            if pod["state"] != "running":
                continue
            busy += len(pod["gpus"])
            held.update((pod["node"], f"gpu{g}") for g in pod["gpus"])
            held.update((pod["node"], m) for m in pod["mig"])
            if pod["share"] is not None:
                shared[pod["node"], f"gpu{pod['share']['gpu']}"] += round(
                    1000 * pod["share"]["fraction"]
                )
    assert held, "nothing is running"
    # MIG ids are "<profile> on GPU <n>": two instances of one profile on one GPU are distinct
    # instances, so only whole GPUs must be unique here
    assert all(n == 1 for (_, dev), n in held.items() if dev.startswith("gpu"))
    # a GPU held in parts is held by no pod whole, and its parts add up to at most all of it
    assert not set(shared) & set(held)
    assert all(0 < milli <= 1000 for milli in shared.values())
    assert report["shared_gpus"] == len(shared)
    assert report["busy_gpus"] == busy + len(shared)
    assert 0 < report["busy_gpus"] <= report["gpus"] == 224
    assert report["stranded_gpus"] <= report["idle_gpus"]


def test_notebooks_asking_for_part_of_a_gpu_share_gpus(report: dict[str, Any]) -> None:
    job = jobs(report)["notebook-share"]
    assert (job["state"], job["placed"], job["pods"]) == ("running", 6, 6)
    shares = [p["share"] for p in job["pod_places"]]
    assert all(p["gpus"] == [] for p in job["pod_places"])  # no pod holds a GPU whole
    # each vocabulary read as written: Topos' fraction, KAI's gpu-fraction, an amount of memory
    # (11Gi of an L40S's 46,068 MiB is 0.245 of it, rounded up)
    assert sorted(s["fraction"] for s in shares) == [0.245, 0.245, 0.25, 0.25, 0.5, 0.5]
    assert {s["memory_mib"] for s in shares if s["fraction"] == 0.245} == {11264}
    gpus = {(p["node"], p["share"]["gpu"]) for p in job["pod_places"]}
    assert len(gpus) < len(shares)  # shared, not one GPU each
    assert all(p["node"].startswith("l40s-") for p in job["pod_places"])
    assert "of one GPU, sharing" in job["why"]
    assert report["share_pods"] == 6


def test_progress_goes_to_stderr_in_lines_when_not_a_terminal(report: dict[str, Any]) -> None:
    err = report["_stderr"]
    assert "\r" not in err
    for stage in ("coordinator:", "agents: 32 agents connected", "phase 1:", "phase 2:"):
        assert stage in err


def test_cli_run_prints_the_report_and_exits_zero() -> None:
    proc = subprocess.run(
        [*TOPOS, "demo"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "authentication off" in out
    assert "llm-pretrain-2" in out
    assert "why: gang whole in one leaf" in out
    assert "GPU utilisation" in out
    assert "fragmentation" in out
    assert "locality" in out
    assert "of them shared by 6 pods" in out
    assert "Traceback" not in proc.stderr


def _serve(port: int, preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[str]:
    """``topos demo --serve`` on ``port``, its output read line by line by the test."""
    return subprocess.Popen(
        [*TOPOS, "demo", "--serve", "--port", str(port)],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=preexec_fn,
    )


def test_serve_keeps_the_api_up_for_curl() -> None:
    port = free_port()
    proc = _serve(port)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("Serving the API at") or not line:
                break
        assert line.startswith(f"Serving the API at http://127.0.0.1:{port}"), line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/nodes", timeout=10) as resp:
            body = json.loads(resp.read())
        nodes = {n["name"]: n for n in body["items"]}
        assert len(nodes) == 32
        assert nodes["l40s-01"]["leaf"] == "leaf-4"
        assert nodes["h100-01"]["gpus"] == 8
        url = f"http://127.0.0.1:{port}/v1/pods/demo/llm-pretrain-2-0/explain"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert json.loads(resp.read())["state"] == "bound"
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    assert rc in (0, 130)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_stops_on_sigint_or_sigterm_even_started_with_sigint_ignored(
    stop: signal.Signals,
) -> None:
    """Started as a script's background job does (``nohup topos demo --serve &``: SIGINT
    ignored, which the process inherits), the demo still stops on Ctrl-C's signal, and on
    SIGTERM, at once and with status 0."""
    proc = _serve(free_port(), preexec_fn=_ignore_sigint)
    try:
        assert proc.stdout is not None
        line = "x"
        while line and not line.startswith("Serving the API at"):
            line = proc.stdout.readline()
        assert line.startswith("Serving the API at"), line
        proc.send_signal(stop)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--port", "70000"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "topos: --port must be between 0 and 65535"


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run(
            [*TOPOS, "demo", "--port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=subprocess_env(),
        )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("topos: cannot start the demo:")
    assert "Traceback" not in proc.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_redraws_in_place_on_a_terminal_only() -> None:
    from cli.demo import Progress

    tty, log = _Terminal(), io.StringIO()
    for stream in (tty, log):
        bar = Progress(stream, width=10)
        bar.update("agents", 5, 10)
        bar.update("agents", 10, 10)
        bar.done("agents", "10 connected")
    assert "\r  agents" in tty.getvalue()
    assert "█████░░░░░ 5/10" in tty.getvalue()
    assert log.getvalue().count("\n") == 1  # not a terminal: only the finished stage, one line
    assert "\r" not in log.getvalue()
    assert log.getvalue().endswith("agents: 10 connected\n")


def test_the_inference_pool_scales_up_on_tokens_and_back_down(report: dict[str, Any]) -> None:
    steps = report["inference_pool"]
    replicas = [s["replicas"] for s in steps]
    top = replicas.index(max(replicas))
    assert replicas[0] == replicas[-1] == 1
    assert max(replicas) == 6  # ceil(9000 / (1000 x 1.5))
    assert replicas[: top + 1] == sorted(replicas[: top + 1])  # up while the queue grows
    downs = [a - b for a, b in zip(replicas[top:], replicas[top + 1 :], strict=False)]
    assert set(downs) == {1}  # then one at a time
    assert all(s["placed"] == s["replicas"] for s in steps)  # every replica placed by Topos
    assert steps[2]["reason"].startswith("expected TTFT 3500ms > SLO 1500ms")
