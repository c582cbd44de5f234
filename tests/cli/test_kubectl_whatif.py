"""``kubectl topos whatif -f FILE`` against the real coordinator application (in-memory backend,
two DGX A100 nodes, one filled by a low-priority pod): a Job that fits is shown pod by pod, a
JobSet that does not is told why and what would make it fit (preempting that pod, named), a
manifest the coordinator cannot expand is one line and a non-zero exit — and the scheduler's
metrics, pods and queue are the same after as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agent.devices import discover_profile
from cli.kubectl_plugin import DOES_NOT_FIT, PluginError, build_parser, run
from cli.whatif_text import whatif_text
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.scheduler import RUNNING
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.kubectl_plugin import scheduling_metrics

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
spec:
  parallelism: 1
  completions: 1
  template:
    spec:
      schedulerName: topos
      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources:
          limits: {nvidia.com/gpu: 8}
"""

JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: big
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 1
        completions: 1
        template:
          metadata:
            labels: {topos.io/gang: big, topos.io/gang-min: "2"}
          spec:
            schedulerName: topos
            priority: 100
            restartPolicy: Never
            containers:
            - name: main
              image: trainer
              resources:
                limits: {nvidia.com/gpu: 8}
"""


async def _whatif(url: str, path: Path, *sub: str, output: str = "table") -> tuple[str, int]:
    argv = ["--coordinator", url, "-o", output, "whatif", "-f", str(path), *sub]
    args = build_parser().parse_args(argv)
    out = await run(args)
    return out, int(getattr(args, "exit_code", 0))


async def test_whatif_from_a_file_fits_does_not_fit_and_changes_nothing(tmp_path: Path) -> None:
    inventory = Inventory()
    cluster = MemoryCluster(inventory)
    for i in range(2):
        cluster.add_node(
            f"n{i}",
            labels={"topos.io/leaf": "leaf-1"},
            topology=discover_profile("dgx-a100", hostname=f"n{i}"),
        )
    app = wire(Config(), MemoryBackend(cluster))
    async with running(app) as url:
        runtime = app[RUNNING].runtime
        assert runtime is not None
        cluster.create_pod(
            pod("low", gpus=8, priority=0, node_selector={"kubernetes.io/hostname": "n0"})
        )
        await runtime.settle()
        pods_before = cluster.pods()
        metrics_before = await scheduling_metrics(url)
        assert metrics_before  # the scheduling metrics are there to compare

        job = tmp_path / "job.yaml"
        job.write_text(JOB)
        out, code = await _whatif(url, job, "-n", "ml")
        assert code == 0
        lines = out.splitlines()
        assert lines[0] == "Job ml/train: 1 pod"  # -n: its namespace, as kubectl apply -n
        assert lines[1] == "Fits now: yes (on 2 nodes, nothing changed)"
        assert lines[3] == "pod ml/train-0: would go to n1"
        header, row = lines[4], lines[5]
        assert re.split(r"\s{3,}", header) == [
            "POD",
            "NODE",
            "GPUS",
            "LINK",
            "NUMA",
            "DOMAIN",
            "DRA",
        ]
        cells = re.split(r"\s{3,}", row)
        assert cells[:4] == ["ml/train-0", "n1", "0,1,2,3,4,5,6,7", "NVSwitch"]
        assert cells[5] == "leaf-1"

        jobset = tmp_path / "jobset.yaml"
        jobset.write_text(JOBSET)
        out, code = await _whatif(url, jobset, "-n", "ml")
        assert code == DOES_NOT_FIT
        assert "Fits now: no (on 2 nodes, nothing changed)" in out
        assert "pod group ml/big: waiting for pod group big: 0/2 members placed; " in out
        assert "What would make it fit (smallest change first):" in out
        assert "  1. ask for 4 GPUs per pod instead of 8  [fewer-gpus]" in out
        assert (
            "  2. pod group ml/big: preempt 1 lower-priority pod: default/low (priority 0, on n0)"
            "  [preempt]" in out
        )
        as_json = yaml.safe_load((await _whatif(url, jobset, "-n", "ml", output="json"))[0])
        (preempt,) = [s for s in as_json["suggestions"] if s["kind"] == "preempt"]
        assert [v["pod"] for v in preempt["victims"]] == ["default/low"]
        assert {p["pod"] for p in preempt["placements"]} == {
            "ml/big-workers-0-0",
            "ml/big-workers-1-0",
        }

        bad = tmp_path / "bad.yaml"
        bad.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n")
        with pytest.raises(
            PluginError,
            match=r"^400: documents\[0\]: kind: cannot expand apiVersion 'apps/v1' kind "
            "'Deployment'",
        ):
            await _whatif(url, bad, "-n", "ml")
        empty = tmp_path / "empty.yaml"
        empty.write_text("---\n")
        with pytest.raises(PluginError, match="holds no documents"):
            await _whatif(url, empty, "-n", "ml")

        # nothing changed: the same pods (none created, none evicted), no queue entry, the
        # same scheduling metrics
        assert cluster.pods() == pods_before
        assert len(runtime.scheduler.queue) == 0
        assert await scheduling_metrics(url) == metrics_before


def test_the_text_says_when_it_would_start_and_waiting_comes_first() -> None:
    doc = {
        "fits": False,
        "nodes": 2,
        "workloads": [{"kind": "Pod", "namespace": "ml", "name": "mine", "pods": 1}],
        "units": [{"unit": "pod ml/mine", "fits": False, "pods": ["ml/mine"], "message": "0/2"}],
        "predicted_start_s": 2400.0,
        "waits_for": ["ml/train-7"],
        "suggestions": [
            {
                "rank": 1,
                "kind": "wait",
                "summary": "wait ~40 min for ml/train-7 (annotation) to end",
            }
        ],
    }
    lines = whatif_text(doc).splitlines()
    assert lines[2] == "Expected to start in ~40 min, when ml/train-7 ends"
    assert "  1. wait ~40 min for ml/train-7 (annotation) to end  [wait]" in lines
