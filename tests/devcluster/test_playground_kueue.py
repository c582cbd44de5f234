"""``topos devcluster up --kueue`` as a user runs it: Kueue starts with the playground (JobSet and
LWS with it), a user's ResourceFlavor, ClusterQueue and LocalQueue admit a Job that names the
queue, Topos places its pods on the simulated nodes and KWOK runs them, and ``down`` stops Kueue
with the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.binaries import find
from devcluster.processes import alive
from devcluster.subprocess_env import subprocess_env
from devcluster.workloads import build
from devcluster.workloads.catalog import KUEUE, with_requirements
from tests.support.ci import skip_or_fail

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[2]
WAIT = "--timeout=180s"
QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: default}
spec: {clusterQueue: team-a}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: default
  labels: {kueue.x-k8s.io/queue-name: team-a}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      schedulerName: topos
      restartPolicy: Never
      containers:
      - name: train
        image: trainer
        resources:
          requests: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "4"}
          limits: {nvidia.com/gpu: "4"}
"""


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


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, Path]]:
    binaries = find(extra=True)
    if binaries is None or binaries.kwok is None:
        skip_or_fail("kwok is not built (python -m devcluster.binaries ensure --all)")
    missing = [c.name for c in with_requirements([KUEUE.name]) if build.find(c) is None]
    if missing:
        skip_or_fail(f"controllers not built: {', '.join(missing)} (make controllers)")
    directory = tmp_path_factory.mktemp("playground-kueue") / "dc"
    up = topos(
        "devcluster",
        "up",
        "--nodes",
        "dgx-a100:2",
        "--coordinator",
        "--job-duration",
        "0",
        "--kueue",
        "--dir",
        str(directory),
    )
    try:
        assert up.returncode == 0, up.stderr
        assert "kueue v0.17.0" in up.stderr
        kubeconfig = up.stdout.splitlines()[0].removeprefix("export KUBECONFIG=")
        yield directory, kubeconfig, binaries.kubectl
    finally:
        topos("devcluster", "down", "--dir", str(directory))


def test_a_job_in_a_queue_is_admitted_by_kueue_placed_by_topos_and_runs(
    playground: tuple[Path, str, Path],
) -> None:
    directory, kubeconfig, kubectl_path = playground

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(kubectl_path), "--kubeconfig", kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    running = json.loads((directory / "workloads" / "state.json").read_text())["processes"]
    assert [p["name"] for p in running] == ["jobset", "lws", "kueue"]
    kubectl("apply", "-f", "-", stdin=QUEUES)
    # Kueue's webhook suspended the Job; once admitted Kueue starts it and the Job controller
    # makes its two pods.
    kubectl("wait", "--for=jsonpath={.status.active}=2", "job/train", WAIT)
    kubectl("wait", "--for=condition=Ready", "pod", "-l", "job-name=train", WAIT)
    (workload,) = json.loads(kubectl("get", "workloads.kueue.x-k8s.io", "-o", "json"))["items"]
    conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
    assert conditions["Admitted"] == "True"
    assert workload["status"]["admission"]["clusterQueue"] == "team-a"
    pods = json.loads(kubectl("get", "pods", "-l", "job-name=train", "-o", "json"))["items"]
    assert len(pods) == 2
    for pod in pods:
        assignment = pod["metadata"]["annotations"]["topos.io/assigned-gpus"]
        assert len(assignment.split(",")) == 4, assignment
        assert pod["status"]["phase"] == "Running"
    down = topos("devcluster", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert [p["name"] for p in running if alive(p["pid"])] == []
