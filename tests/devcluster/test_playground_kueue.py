"""``topos devcluster up --kueue`` as a user runs it: Kueue starts with the playground (JobSet and
LWS with it), a user's ResourceFlavor, ClusterQueue and LocalQueue admit a Job that names the
queue, Topos places its pods on the simulated nodes and KWOK runs them, and ``down`` stops Kueue
with the rest."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from devcluster.processes import alive
from devcluster.workloads.catalog import KUEUE
from tests.support.workload_playground import Playground, topos, workload_playground

pytestmark = pytest.mark.kube

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


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    directory = tmp_path_factory.mktemp("playground-kueue") / "dc"
    with workload_playground(directory, "--kueue", [KUEUE.name]) as started:
        assert f"kueue {KUEUE.version}" in started.stderr
        yield started


def test_a_job_in_a_queue_is_admitted_by_kueue_placed_by_topos_and_runs(
    playground: Playground,
) -> None:
    kubectl = playground.kubectl
    running = playground.controllers()
    assert [p.name for p in running] == ["jobset", "lws", "kueue"]
    kubectl("apply", "-f", "-", stdin=QUEUES)
    # Kueue's webhook suspended the Job; once admitted Kueue starts it and the Job controller
    # makes its two pods.
    kubectl("wait", "--for=jsonpath={.status.active}=2", "job/train", WAIT)
    kubectl("wait", "--for=condition=Ready", "pod", "-l", "job-name=train", WAIT)
    (workload,) = json.loads(kubectl("get", "workloads.kueue.x-k8s.io", "-o", "json"))["items"]
    conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
    assert conditions["Admitted"] == "True"
    assert workload["status"]["admission"]["clusterQueue"] == "team-a"
    pods = playground.pods("job-name=train")
    assert len(pods) == 2
    for pod in pods:
        assignment = pod["metadata"]["annotations"]["topos.io/assigned-gpus"]
        assert len(assignment.split(",")) == 4, assignment
        assert pod["status"]["phase"] == "Running"
    down = topos("devcluster", "down", "--dir", str(playground.directory))
    assert down.returncode == 0, down.stderr
    assert [p.name for p in running if alive(p.pid)] == []
