"""``topos devcluster up --workloads`` as a user runs it: the four workload controllers start with
the playground, their examples' pods are made by them, placed by Topos and run on the simulated
nodes (KWOK), and ``down`` stops the controllers with the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.binaries import find
from devcluster.processes import alive, port_in_use
from devcluster.subprocess_env import subprocess_env
from devcluster.workloads import build
from devcluster.workloads.catalog import CONTROLLERS
from tests.support.ci import skip_or_fail
from tests.support.workload_examples import lws_sample, paralleljobs

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[2]
WAIT = "--timeout=180s"


def topos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=subprocess_env(),
    )


@dataclass
class Playground:
    directory: Path
    kubectl_path: Path
    kubeconfig: str
    stderr: str

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"])

    def controllers(self) -> list[dict[str, Any]]:
        state = json.loads((self.directory / "workloads" / "state.json").read_text())
        return list(state["processes"])


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    binaries = find(extra=True)
    if binaries is None or binaries.kwok is None:
        skip_or_fail("kwok is not built (python -m devcluster.binaries ensure --all)")
    missing = [name for name, c in CONTROLLERS.items() if build.find(c) is None]
    if missing:
        skip_or_fail(f"workload controllers not built: {', '.join(missing)} (make controllers)")
    directory = tmp_path_factory.mktemp("playground-workloads") / "dc"
    up = topos(
        "devcluster",
        "up",
        "--nodes",
        "dgx-a100:2",
        "--coordinator",
        "--job-duration",
        "0",
        "--workloads",
        "--dir",
        str(directory),
    )
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.splitlines()[0].removeprefix("export KUBECONFIG=")
        yield Playground(directory, binaries.kubectl, kubeconfig, up.stderr)
    finally:
        topos("devcluster", "down", "--dir", str(directory))


def test_up_starts_the_four_controllers_and_says_so(playground: Playground) -> None:
    running = playground.controllers()
    assert [p["name"] for p in running] == ["jobset", "lws", "trainer", "kuberay"]
    assert all(alive(p["pid"]) for p in running)
    assert "workload controllers jobset v0.10.1, lws v0.7.0, trainer v2.0.0, kuberay v1.5.0" in (
        playground.stderr
    )
    crds = playground.kubectl("get", "crd", "-o", "name")
    for name in ("jobsets.jobset.x-k8s.io", "leaderworkersets.leaderworkerset.x-k8s.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds
    for name in ("trainjobs.trainer.kubeflow.org", "rayclusters.ray.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds
    assert "torch-distributed" in playground.kubectl("get", "clustertrainingruntimes", "-o", "name")


def test_a_jobsets_pods_are_made_placed_and_run(playground: Playground) -> None:
    playground.apply(paralleljobs())
    jobs = ("job/paralleljobs-workers-0", "job/paralleljobs-driver-0")
    playground.kubectl("wait", "--for=create", *jobs, WAIT)
    playground.kubectl("wait", "--for=jsonpath={.status.active}=4", jobs[0], WAIT)
    playground.kubectl("wait", "--for=jsonpath={.status.active}=1", jobs[1], WAIT)
    selector = "jobset.sigs.k8s.io/jobset-name=paralleljobs"
    playground.kubectl("wait", "--for=condition=Ready", "pod", "-l", selector, WAIT)
    pods = playground.pods(selector)
    states = {
        p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"]["phase"]) for p in pods
    }
    assert len(states) == 5, states
    assert all(node and phase == "Running" for node, phase in states.values()), states


def test_an_lws_samples_groups_all_become_ready(playground: Playground) -> None:
    playground.apply(lws_sample())
    name = "leaderworkerset/leaderworkerset-sample"
    # Not condition Available: with the sample's maxUnavailable: 1 that holds at 2 groups of 3.
    playground.kubectl("wait", "--for=jsonpath={.status.readyReplicas}=3", name, WAIT)
    # LWS counts a group ready once its leader is Ready and its workers exist
    # (pkg/utils/statefulset.StatefulsetReady), not once they run.
    selector = "leaderworkerset.sigs.k8s.io/name=leaderworkerset-sample"
    playground.kubectl("wait", "--for=condition=Ready", "pod", "-l", selector, WAIT)
    pods = playground.pods(selector)
    states = {
        p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"]["phase"]) for p in pods
    }
    assert len(states) == 12, states
    assert all(node and phase == "Running" for node, phase in states.values()), states


def test_down_stops_the_controllers_too(playground: Playground) -> None:
    running = playground.controllers()
    down = topos("devcluster", "down", "--dir", str(playground.directory))
    assert down.returncode == 0, down.stderr
    assert [p["name"] for p in running if alive(p["pid"])] == []
    ports = [p[key] for p in running for key in ("health_port", "webhook_port")]
    assert [port for port in ports if port_in_use(port)] == []
    assert not playground.directory.exists()
