"""``topos devcluster up`` / ``down`` through the real command line, in subprocesses.

``up`` must return while the control plane keeps running (kubectl works with the printed
KUBECONFIG, and a Job makes its pod: kube-controller-manager runs), refuse a second ``up`` on the
same directory, and ``down`` must stop every process and free every port it used. Also the
binaries' override rules.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devcluster.binaries import Binaries, BinariesUnavailable, ensure, kubernetes_wrapper_go_mod
from devcluster.processes import alive, port_in_use
from devcluster.subprocess_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]


def topos(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=subprocess_env() if env is None else env,
    )


@pytest.mark.kube
def test_up_kubectl_down(k8s_binaries: Binaries, tmp_path: Path) -> None:
    directory = tmp_path / "dc"
    up = topos("devcluster", "up", "--dir", str(directory))
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip() == f"export KUBECONFIG={directory / 'kubeconfig'}"
    state = json.loads((directory / "state.json").read_text())
    pids = [state["etcd_pid"], state["apiserver_pid"], state["controller_manager_pid"]]
    ports = [state[f"{name}_port"] for name in ("etcd", "etcd_peer", "apiserver")]
    ports.append(state["controller_manager_port"])

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(k8s_binaries.kubectl), "--kubeconfig", str(directory / "kubeconfig"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    try:
        assert all(alive(pid) for pid in pids)  # survived the `up` process
        listed = kubectl("get", "ns")
        assert listed.returncode == 0, listed.stderr
        assert "default" in listed.stdout.split()
        made = kubectl("create", "job", "hello", "--image=busybox")
        assert made.returncode == 0, made.stderr
        deadline = time.monotonic() + 60
        while not kubectl("get", "pods", "-l", "job-name=hello", "-o", "name").stdout.strip():
            assert time.monotonic() < deadline, "the Job made no pod: no controller-manager?"
            time.sleep(0.2)

        again = topos("devcluster", "up", "--dir", str(directory))
        assert again.returncode == 1
        assert "already running" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1  # one line, no traceback
    finally:
        down = topos("devcluster", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert not any(alive(pid) for pid in pids)
    assert not any(port_in_use(port) for port in ports)
    assert not (directory / "state.json").exists()
    assert not (directory / "kubeconfig").exists()

    # down with nothing running is harmless
    assert topos("devcluster", "down", "--dir", str(directory)).returncode == 0


def test_up_with_unusable_binaries_is_one_clear_line(tmp_path: Path) -> None:
    env = subprocess_env(TOPOS_K8S_BIN=str(tmp_path / "empty"))
    result = topos("devcluster", "up", "--dir", str(tmp_path / "dc"), env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("topos: Kubernetes binaries unavailable")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "dc" / "state.json").exists()


def test_override_directory_must_be_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    monkeypatch.setenv("TOPOS_K8S_BIN", str(tmp_path))
    with pytest.raises(BinariesUnavailable, match="kube-apiserver"):
        ensure()


def test_envtest_assets_are_used_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("etcd", "kube-apiserver", "kubectl"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.delenv("TOPOS_K8S_BIN", raising=False)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = ensure()
    assert found.source == "KUBEBUILDER_ASSETS"
    assert found.kube_apiserver == tmp_path / "kube-apiserver"
    assert found.kube_controller_manager is None  # envtest has none: no controllers run


def test_wrapper_module_pins_every_staging_module() -> None:
    upstream = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require k8s.io/api v0.0.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/other/thing => github.com/other/thing v1.2.3
)
"""
    go_mod = kubernetes_wrapper_go_mod(upstream, "1.36.3", ["kube-apiserver"])
    assert "require k8s.io/kubernetes v1.36.3" in go_mod
    assert "\tk8s.io/api => k8s.io/api v0.36.3" in go_mod
    assert "\tk8s.io/client-go => k8s.io/client-go v0.36.3" in go_mod
    assert "github.com/other/thing" not in go_mod
    assert "godebug default=go1.26" in go_mod
    assert "\tk8s.io/kubernetes/cmd/kube-apiserver" in go_mod


def test_wrapper_module_refuses_a_go_mod_without_staging() -> None:
    with pytest.raises(BinariesUnavailable, match="staging"):
        kubernetes_wrapper_go_mod("module k8s.io/kubernetes\n\ngo 1.26.0\n", "1.36.3", ["kubectl"])


@pytest.mark.kube
def test_up_dra_makes_the_simulated_gpus_dra_devices(
    k8s_binaries: Binaries, tmp_path: Path
) -> None:
    directory = tmp_path / "dc"
    up = topos("devcluster", "up", "--dir", str(directory), "--nodes", "dgx-a100:1", "--dra")
    assert up.returncode == 0, up.stderr
    assert "GPUs as DRA devices" in up.stderr

    def get(*what: str) -> Any:
        kubectl = [str(k8s_binaries.kubectl), "--kubeconfig", str(directory / "kubeconfig")]
        done = subprocess.run(
            [*kubectl, "get", *what, "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    try:
        slices = get("resourceslices")["items"]
        assert [s["spec"]["pool"]["name"] for s in slices] == ["dgx-a100-0"]
        names = [d["name"] for d in slices[0]["spec"]["devices"]]
        assert names == [f"gpu-{i}" for i in range(8)]
        classes = {c["metadata"]["name"] for c in get("deviceclasses")["items"]}
        assert classes == {"gpu.nvidia.com", "mig.nvidia.com"}
        node = get("node", "dgx-a100-0")
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]  # DRA, not device plugin
    finally:
        down = topos("devcluster", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
