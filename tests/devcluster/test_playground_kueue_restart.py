"""The placement check across a coordinator SIGKILL, on ``topos devcluster up --kueue`` (the real
Kueue, a real ``topos coordinator`` process, KWOK nodes): the check says Ready for a Job whose pod
waits behind a scheduling gate; the coordinator process is killed with SIGKILL before the pod is
bound and started again with the same configuration. The new process holds the room again from
the check's podSetUpdates before it schedules anything: a pod of the same size created meanwhile
stays Pending, and the Job's pod, its gate lifted, binds on the node the check named."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from common.kube import PODS, KubeClient
from devcluster import coordinator as topos_coordinator
from devcluster import pods
from devcluster.kube_wait import wait_for, wait_for_object, wait_for_pods
from devcluster.processes import alive
from devcluster.workloads.catalog import KUEUE
from tests.support.kueue import JOBS, WORKLOADS, is_true, job
from tests.support.workload_playground import Playground, workload_playground

pytestmark = pytest.mark.kube

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: placement}
spec: {controllerName: topos.io/placement}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  admissionChecksStrategy:
    admissionChecks: [{name: placement}]
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {name: cpu, nominalQuota: 256}
      - {name: memory, nominalQuota: 4Ti}
      - {name: nvidia.com/gpu, nominalQuota: 16}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: default}
spec: {clusterQueue: team-a}
"""


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    directory = tmp_path_factory.mktemp("playground-kueue-restart") / "dc"
    with workload_playground(directory, "--kueue", [KUEUE.name]) as started:
        yield started


def check_of(workload: dict[str, Any]) -> dict[str, Any]:
    for check in (workload.get("status") or {}).get("admissionChecks") or []:
        if check.get("name") == "placement":
            return dict(check)
    return {}


async def test_room_a_ready_check_holds_survives_a_sigkilled_coordinator_process(
    playground: Playground,
) -> None:
    playground.kubectl("apply", "-f", "-", stdin=QUEUES)
    playground.kubectl("wait", "--for=condition=Active", "clusterqueue/team-a", "--timeout=180s")
    state = topos_coordinator.state_dir(playground.directory)
    first = json.loads((state / "state.json").read_text())
    kube = await KubeClient.connect(playground.kubeconfig)
    try:
        # dgx-a100-1 is taken by a pod Kueue does not manage: only dgx-a100-0 has 8 GPUs free.
        other = pods.pod("other", gpus=8, namespace="default", node_selector={
            "kubernetes.io/hostname": "dgx-a100-1"
        })  # fmt: skip
        await kube.create(PODS, other, namespace="default")
        await wait_for_object(
            kube, PODS, "other", lambda p: bool(p["spec"].get("nodeName")), namespace="default"
        )
        gated = job("gated", "team-a", pods=1, gpus=8)
        gated["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
        await kube.create(JOBS, gated, namespace="default")
        admitted = await wait_for(
            kube,
            WORKLOADS,
            lambda items: next((w for w in items if is_true(w, "Admitted")), None),
            namespace="default",
            what="the gated Job's Workload admitted",
        )
        ready = check_of(admitted)
        assert ready["state"] == "Ready", ready
        nodes = ready["podSetUpdates"][0]["annotations"]["topos.io/placement-nodes"]
        assert nodes == "dgx-a100-0"
        (pod,) = await wait_for_pods(
            kube,
            "default",
            lambda found: found or None,
            label_selector="job-name=gated",
            what="the Job's gated pod",
        )
        # SIGKILL: no shutdown, its memory (the held room) gone with it.
        os.kill(int(first["pid"]), signal.SIGKILL)
        second = topos_coordinator.start_coordinator(
            kubeconfig=state / "kubeconfig",
            directory=playground.directory,
            url=str(first["url"]),
            token_file=state / "user.token",
        )
        assert second.pid != int(first["pid"])
        assert alive(second.pid)
        # A pod of the same size (and priority) finds no room: dgx-a100-0 is held for the Job.
        await kube.create(
            PODS, pods.pod("stranger", gpus=8, namespace="default"), namespace="default"
        )
        said = await wait_for_object(
            kube,
            PODS,
            "stranger",
            lambda p: any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in (p.get("status") or {}).get("conditions") or []
            ),
            namespace="default",
            what="the stranger Unschedulable",
        )
        assert not said["spec"].get("nodeName")
        await kube.patch(
            PODS, pod["metadata"]["name"], {"spec": {"schedulingGates": None}}, namespace="default"
        )
        bound = await wait_for_object(
            kube,
            PODS,
            pod["metadata"]["name"],
            lambda p: bool(p["spec"].get("nodeName")),
            namespace="default",
            what="the Job's pod bound",
        )
        assert bound["spec"]["nodeName"] == "dgx-a100-0"
        assert not (await kube.get(PODS, "stranger", namespace="default"))["spec"].get("nodeName")
    finally:
        await kube.close()
