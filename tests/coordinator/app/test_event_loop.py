"""The coordinator process on its event loop, as the image starts it (``python -m
coordinator.app.main``): uvloop unless ``coordinator.eventLoop: asyncio`` says otherwise; the
listener serves either way, SIGTERM stops it cleanly, and a loop it does not know is refused
with the key named."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from devcluster.subprocess_env import subprocess_env


def _start(tmp_path: Path, coordinator: dict[str, object]) -> subprocess.Popen[str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"coordinator": {"listen": "127.0.0.1:0", **coordinator}}))
    argv = [sys.executable, "-m", "coordinator.app.main", "--in-memory", f"--config={config}"]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env()
    )


def _listening(proc: subprocess.Popen[str]) -> str:
    """The message of the coordinator's 'listening' log line (read from its JSON log)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        try:
            record = json.loads(line)
        except ValueError:
            continue
        message = str(record.get("message") or record.get("msg") or "")
        if message.startswith("coordinator listening on"):
            return message
    proc.kill()
    raise AssertionError(f"the coordinator did not start (exit {proc.wait()})")


@pytest.mark.parametrize(
    ("setting", "loop"), [({}, "uvloop"), ({"eventLoop": "asyncio"}, "asyncio")]
)
def test_the_coordinator_serves_on_its_event_loop_and_stops_on_sigterm(
    tmp_path: Path, setting: dict[str, object], loop: str
) -> None:
    proc = _start(tmp_path, setting)
    try:
        message = _listening(proc)
        assert message.endswith(f"(in-memory, event loop: {loop})"), message
        url = message.split()[3]
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as reply:
            assert reply.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_unknown_event_loop_is_refused_with_the_key_named(tmp_path: Path) -> None:
    proc = _start(tmp_path, {"eventLoop": "tokio"})
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "eventLoop" in out
    assert "tokio" in out or "uvloop" in out
