"""The control plane leaves nothing behind: not when its owner exits without stopping it, not
when its owner is killed with SIGKILL, and a failed start reports the component's own words."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devcluster.binaries import Binaries
from devcluster.controlplane import ControlPlane, ControlPlaneError, ControlPlaneSettings
from devcluster.processes import alive, port_in_use
from devcluster.subprocess_env import subprocess_env

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[2]

# Starts a control plane, prints its state, then ends the way argv[1] says.
OWNER = """
import json, os, signal, sys
from devcluster.binaries import ensure
from devcluster.controlplane import ControlPlane
plane = ControlPlane.start(binaries=ensure(log=False))
print(json.dumps({"pids": [pid for pid, _ in plane.state.components()],
                  "ports": list(plane.state.ports), "dir": str(plane.directory)}), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def wait_until_gone(pids: list[int], ports: list[int], limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids) and not any(port_in_use(p) for p in ports):
            return
        time.sleep(0.1)


@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_owner_ending_takes_the_control_plane_along(k8s_binaries: Binaries, ending: str) -> None:
    owner = subprocess.run(
        [sys.executable, "-c", OWNER, ending],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert owner.stdout, owner.stderr
    state = json.loads(owner.stdout.splitlines()[0])
    wait_until_gone(state["pids"], state["ports"])
    assert not any(alive(pid) for pid in state["pids"])
    assert not any(port_in_use(port) for port in state["ports"])
    if ending == "exit":  # a clean exit also removes the temporary directory
        assert not Path(state["dir"]).exists()


def test_a_bad_flag_fails_the_start_with_the_servers_words(
    k8s_binaries: Binaries, tmp_path: Path
) -> None:
    settings = ControlPlaneSettings(extra_apiserver_args=("--no-such-flag=1",))
    with pytest.raises(ControlPlaneError, match="no-such-flag"):
        ControlPlane.start(binaries=k8s_binaries, directory=tmp_path / "cp", settings=settings)
    state = json.loads((tmp_path / "cp" / "state.json").read_text())
    assert not alive(state["etcd_pid"])
    assert not port_in_use(state["etcd_port"])
