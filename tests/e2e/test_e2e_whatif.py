"""``kubectl topos whatif -f FILE`` on the real control plane: the real ``kubectl`` runs the
``kubectl-topos`` plugin from PATH against a coordinator scheduling two DGX A100 nodes (their
topology published by ``topos agent --once``), one of them filled by a running pod.

A user sees: a Job that fits, with the node, GPUs, link and NUMA nodes its pod would get; a
JobSet that does not, with the words its pods' FailedScheduling would carry and what would make
it fit (fewer GPUs per pod; preempting the running pod, named); a manifest the coordinator cannot
expand as one line and exit status 1. And nothing changed: no pod, Event, binding or status was
written, the running pod is untouched, and the scheduler's metrics read the same."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agent.devices import discover_profile
from common.kube import EVENTS, PODS, KubeClient
from common.labels import LEAF
from coordinator.api.keys import INVENTORY
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from devcluster.binaries import Binaries
from devcluster.kube_wait import wait_for_bound
from devcluster.nodes import SimNode, register
from devcluster.pods import gpu_pod
from devcluster.subprocess_env import subprocess_env
from tests.support.ci import skip_or_fail
from tests.support.inventory_wait import until
from tests.support.kubectl_plugin import PLUGIN, kubectl_topos, scheduling_metrics
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[2]

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: finetune
spec:
  template:
    metadata:
      annotations: {topos.io/gpu-locality: nvlink}
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
  name: pretrain
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        template:
          metadata:
            labels: {topos.io/gang: pretrain, topos.io/gang-min: "2"}
          spec:
            schedulerName: topos
            priority: 1000
            restartPolicy: Never
            containers:
            - name: main
              image: trainer
              resources:
                limits: {nvidia.com/gpu: 8}
"""


async def _agent_once(kubeconfig: Path, node: SimNode) -> None:
    """`topos agent --once` for ``node``: its topology published on the Node."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "cli.main", "agent", "--once", "--profile", node.profile),
        *("--node", node.name, "--kubeconfig", str(kubeconfig)),
        cwd=REPO,
        env=subprocess_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin")}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()


@contextlib.asynccontextmanager
async def _coordinator(
    kubeconfig: Path, namespace: str, leaf: str
) -> AsyncIterator[tuple[web.Application, str]]:
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduler": {"namespace": namespace, "nodeSelector": {LEAF: leaf}},
        }
    )
    app = wire(config, KubeBackend(str(kubeconfig)))
    async with running(app) as url:
        yield app, url


async def _live(kube: KubeClient, namespace: str) -> tuple[Any, ...]:
    pods = (await kube.list(PODS, namespace=namespace))["items"]
    events = (await kube.list(EVENTS, namespace=namespace))["items"]
    return (
        sorted((p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in pods),
        sorted(e["metadata"]["name"] for e in events),
    )


async def test_whatif_with_the_real_kubectl_fits_does_not_fit_and_changes_nothing(
    k8s_binaries: Binaries,
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    if not PLUGIN.exists():
        skip_or_fail("kubectl-topos is not installed in this venv (pip install -e '.[dev]')")
    leaf = unique_name("leaf")
    nodes = []
    for _ in range(2):
        name = unique_name("dgx")
        topology = discover_profile("dgx-a100", hostname=name)
        nodes.append(
            SimNode(name=name, profile="dgx-a100", leaf=leaf, spine="s", topology=topology)
        )
    await register(kube, nodes)
    for node in nodes:
        await _agent_once(kubeconfig, node)
    job, jobset, bad = tmp_path / "job.yaml", tmp_path / "jobset.yaml", tmp_path / "bad.yaml"
    job.write_text(JOB)
    jobset.write_text(JOBSET)
    bad.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n")

    async with _coordinator(kubeconfig, namespace, leaf) as (app, url):
        inv = app[INVENTORY]
        await until(inv, lambda: all(inv.node(n.name) is not None for n in nodes))
        await kube.create(PODS, gpu_pod("running", 8), namespace=namespace)
        running_pod = await wait_for_bound(kube, namespace, "running")
        busy = running_pod["spec"]["nodeName"]
        (free,) = [n.name for n in nodes if n.name != busy]

        async def scheduled_event() -> bool:
            # The bind's Scheduled Event may be written after the bind (Event writes yield to
            # binds): "before" is the state once it is there.
            events = (await kube.list(EVENTS, namespace=namespace))["items"]
            return any(e.get("reason") == "Scheduled" for e in events)

        await eventually(scheduled_event, what="the running pod's Scheduled Event")
        before = await _live(kube, namespace)
        metrics_before = await scheduling_metrics(url)

        def topos(*args: str) -> Any:
            return kubectl_topos(k8s_binaries, kubeconfig, "--coordinator", url, *args)

        code, out, err = await topos("whatif", "-f", str(job), "-n", namespace)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == f"Job {namespace}/finetune: 1 pod"
        assert lines[1] == "Fits now: yes (on 2 nodes, nothing changed)"
        assert lines[3] == f"pod {namespace}/finetune-0: would go to {free}"
        cells = re.split(r"\s{3,}", lines[5])
        assert cells[:4] == [f"{namespace}/finetune-0", free, "0,1,2,3,4,5,6,7", "NVSwitch"]

        code, out, err = await topos("whatif", "-f", str(jobset), "-n", namespace)
        assert code == 2, err  # does not fit
        assert "Fits now: no (on 2 nodes, nothing changed)" in out
        assert (
            f"pod group {namespace}/pretrain: waiting for pod group pretrain: 0/2 members placed; "
            "0/2 nodes are available: " in out
        )
        assert "What would make it fit (smallest change first):" in out
        assert "  1. ask for 4 GPUs per pod instead of 8  [fewer-gpus]" in out
        assert (
            f"  2. pod group {namespace}/pretrain: preempt 1 lower-priority pod: "
            f"{namespace}/running (priority 0, on {busy})  [preempt]" in out
        )

        code, out, err = await topos("whatif", "-f", str(bad), "-n", namespace)
        assert code == 1
        assert out == ""
        assert err.strip() == (
            "kubectl-topos: 400: documents[0]: kind: cannot expand apiVersion 'apps/v1' kind "
            "'Deployment' (known: v1 Pod, batch/v1 Job, jobset.x-k8s.io/v1alpha2 JobSet, "
            "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet, scheduling.x-k8s.io/v1alpha1 PodGroup, "
            "scheduling.k8s.io/v1alpha2 PodGroup, neuronetes.io/v1alpha1 AgentPool, v1 List)"
        )

        # Nothing changed: the same pods at the same resourceVersions (none created, the running
        # one neither evicted nor patched), no new Event, the same scheduling metrics.
        assert await _live(kube, namespace) == before
        assert await scheduling_metrics(url) == metrics_before
