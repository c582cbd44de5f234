"""The forecast's worker process starts at the first forward run, not with the coordinator, and
ends with the coordinator: at once on a stop, even mid-run, and on its own when the coordinator
process dies without stopping it (SIGKILL)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from coordinator.app import forecast_worker
from devcluster.subprocess_env import subprocess_env

ROOT = Path(__file__).resolve().parents[3]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0]
    except OSError:
        return True
    return state == "Z"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _long_run(started: Path) -> None:
    started.write_text(str(os.getpid()))
    time.sleep(120)  # a forward run that would outlast the coordinator


def test_no_worker_process_runs_until_the_first_forward_run() -> None:
    """A coordinator whose pods never wait a poll never pays the worker's spawn and imports."""
    before = {p.pid for p in multiprocessing.active_children()}
    pool = forecast_worker.start()
    try:
        assert {p.pid for p in multiprocessing.active_children()} == before
        pid = pool.submit(os.getpid).result(timeout=60)
        assert pid != os.getpid()
        assert {p.pid for p in multiprocessing.active_children()} - before == {pid}
    finally:
        forecast_worker.stop_now(pool)


def test_stop_now_ends_a_worker_in_the_middle_of_a_run(tmp_path: Path) -> None:
    pool = forecast_worker.start()
    pid = pool.submit(os.getpid).result(timeout=60)
    pool.submit(_long_run, tmp_path / "started")
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "started").read_text() == str(pid)
    started = time.monotonic()
    forecast_worker.stop_now(pool)
    assert _wait_gone(pid, 10), "the worker still runs after stop_now"
    assert time.monotonic() - started < 10


_CRASHING_COORDINATOR = """
import os, sys, time
from coordinator.app import forecast_worker
from devcluster.subprocess_env import subprocess_env
pool = forecast_worker.start()
print(pool.submit(os.getpid).result(timeout=60), flush=True)
time.sleep(600)
"""


def test_the_worker_exits_when_the_coordinator_is_killed() -> None:
    coordinator = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_COORDINATOR],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert coordinator.stdout is not None
        worker = int(coordinator.stdout.readline())
        assert not _gone(worker)
        os.kill(coordinator.pid, signal.SIGKILL)
        coordinator.wait(timeout=30)
        assert _wait_gone(worker, 30), f"forecast worker {worker} outlived its coordinator"
    finally:
        coordinator.kill()
