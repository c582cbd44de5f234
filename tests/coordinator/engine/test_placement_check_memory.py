"""The placement admission check's decision and the room it holds (in-memory cluster): a
workload's podSets are one gang — all placed or the check waits, saying why; once Ready the room
is held, so a later pod of the same priority cannot take it while the workload's own pods (with
the group label Kueue writes from the check's podSetUpdates) bind there; a bad template is
rejected naming the problem."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.app.scheduler import what_if
from coordinator.engine.admission.placement import (
    PLACEMENT_GROUP,
    controller_keys,
    decide,
    pod_set_updates,
    reserve,
)
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[MemoryCluster, SchedulerRuntime, GangRuntime]]:
    inventory = Inventory(stale_ttl_s=3600)
    cluster = MemoryCluster(inventory)
    for name in ("dgx-a", "dgx-b"):
        cluster.add_node(name, topology=discover_profile("dgx-h100", hostname=name))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings(tick_s=0.05))
    async with runtime, gangs:
        yield cluster, runtime, gangs


def workload(name: str, *podsets: tuple[str, int, int]) -> dict[str, Any]:
    """A Kueue Workload: podSets ``(name, count, gpus per pod)``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "podSets": [
                {
                    "name": ps,
                    "count": count,
                    "template": {
                        "metadata": {"labels": {"kueue.x-k8s.io/podset": ps}},
                        "spec": pod("t", gpus=gpus)["spec"],
                    },
                }
                for ps, count, gpus in podsets
            ]
        },
    }


def node_of(cluster: MemoryCluster, name: str) -> str | None:
    obj = cluster.pod("default", name)
    assert obj is not None
    node: str | None = obj["spec"].get("nodeName")
    return node


async def test_the_whole_workload_or_the_reason(
    cluster: tuple[MemoryCluster, SchedulerRuntime, GangRuntime],
) -> None:
    _, runtime, gangs = cluster
    whatif = what_if(runtime, gangs)
    fits = decide(whatif, workload("two", ("main", 2, 8)))
    assert fits.state == "Ready", fits.message
    assert sorted(fits.nodes["main"]) == ["dgx-a", "dgx-b"]
    assert fits.message.startswith("Workload default/two: all 2 pods fit now (gang kueue-two)")
    # Three whole nodes' worth on two nodes: not one pod is admitted alone.
    too_big = decide(whatif, workload("three", ("main", 2, 8), ("extra", 1, 8)))
    assert too_big.state == "Pending"
    assert "Workload default/three: cannot place all 3 pods now" in too_big.message
    assert "Insufficient nvidia.com/gpu" in too_big.message or "members" in too_big.message
    assert too_big.nodes == {}


async def test_the_message_names_the_jobset_the_user_applied_and_the_gang_as_detail(
    cluster: tuple[MemoryCluster, SchedulerRuntime, GangRuntime],
) -> None:
    _, runtime, gangs = cluster
    # Kueue names a JobSet's Workload jobset-<name>-<hash> and owns it by the JobSet
    wl = workload("jobset-train-5f2a1", ("workers", 3, 8))
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train"}
    wl["metadata"]["ownerReferences"] = [{**owner, "uid": "u", "controller": True}]
    verdict = decide(what_if(runtime, gangs), wl)
    assert verdict.state == "Pending"
    said = verdict.message
    assert said.startswith("JobSet default/train: cannot place all 3 pods now: "), said
    assert "pod group kueue-jobset-train-5f2a1" in said  # the gang, as detail
    # an owner that is not the controller is not what the user applied
    wl["metadata"]["ownerReferences"] = [{**owner, "uid": "u"}]
    assert decide(what_if(runtime, gangs), wl).message.startswith(
        "Workload default/jobset-train-5f2a1: cannot place"
    )


async def test_a_template_topos_cannot_read_is_rejected_naming_it(
    cluster: tuple[MemoryCluster, SchedulerRuntime, GangRuntime],
) -> None:
    _, runtime, gangs = cluster
    bad = workload("bad", ("main", 1, 1))
    bad["spec"]["podSets"][0]["template"]["metadata"]["annotations"] = {
        "topos.io/gpu-locality": "same-galaxy"
    }
    verdict = decide(what_if(runtime, gangs), bad)
    assert verdict.state == "Rejected"
    assert "topos.io/gpu-locality" in verdict.message
    assert "same-galaxy" in verdict.message


def jobset(name: str, annotations: dict[str, str], **replicated: dict[str, str]) -> dict[str, Any]:
    """A JobSet with ``annotations``; ``replicated``: a replicatedJob's Job template's."""
    jobs = [
        {"name": job, "template": {"metadata": {"annotations": written}}}
        for job, written in replicated.items()
    ]
    return {
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"replicatedJobs": jobs},
    }


async def test_keys_written_on_the_jobset_are_decided_as_its_pods_will_carry_them(
    cluster: tuple[MemoryCluster, SchedulerRuntime, GangRuntime],
) -> None:
    """17 CPU-only pods each asking 3/4 of a GPU by the JobSet's annotation: 16 GPUs hold 16
    such shares, so the check waits; the same template read without the JobSet's keys would
    have said Ready and the pods would then wait after admission. A key the podset's Job
    template writes wins over the JobSet's."""
    _, runtime, gangs = cluster
    whatif = what_if(runtime, gangs)
    wl = workload("jobset-share-1a2b3", ("workers", 17, 0))
    assert decide(whatif, wl).state == "Ready"  # read without the JobSet's keys
    owner = jobset("share", {"topos.io/gpu-fraction": "0.75"})
    verdict = decide(whatif, wl, controller_keys(owner))
    assert verdict.state == "Pending", verdict.message
    assert "16 places on a GPU for a share of 0.75" in verdict.message
    # the replicatedJob's own template says half a GPU: 34 such shares fit on 16 GPUs
    nearer = jobset(
        "share", {"topos.io/gpu-fraction": "0.75"}, workers={"topos.io/gpu-fraction": "0.5"}
    )
    assert decide(whatif, wl, controller_keys(nearer)).state == "Ready"
    # the pod template's own key wins over both
    template = wl["spec"]["podSets"][0]["template"]["metadata"]
    template["annotations"] = {"topos.io/gpu-fraction": "0.75"}
    assert decide(whatif, wl, controller_keys(nearer)).state == "Pending"


async def test_a_bad_key_on_the_jobset_is_rejected_naming_the_jobset_and_the_key(
    cluster: tuple[MemoryCluster, SchedulerRuntime, GangRuntime],
) -> None:
    """The user's trial: `topology.scheduler/placement-strategy: packed` on the JobSet. Read
    without it the check said Ready, Kueue admitted the JobSet and each pod then failed with
    `pod spec is invalid`, holding the quota; now the check refuses it before any pod exists."""
    _, runtime, gangs = cluster
    whatif = what_if(runtime, gangs)
    wl = workload("jobset-bad-231d9", ("workers", 2, 8))
    owner = jobset("bad", {"topology.scheduler/placement-strategy": "packed"})
    verdict = decide(whatif, wl, controller_keys(owner))
    assert verdict.state == "Rejected"
    assert verdict.message.startswith("JobSet default/bad, inherited by its pods: "), (
        verdict.message
    )
    assert "topology.scheduler/placement-strategy" in verdict.message
    assert "'packed'" in verdict.message
    # nothing else harmed: another workload of the same cluster is decided as before
    assert decide(whatif, workload("fine", ("main", 2, 8))).state == "Ready"
    # a bad key in the template itself is still named as the template's
    wl["spec"]["podSets"][0]["template"]["metadata"]["annotations"] = {
        "topos.io/gpu-locality": "same-galaxy"
    }
    said = decide(whatif, wl, controller_keys(jobset("bad", {}))).message
    assert said.startswith("pod template of jobset-bad-231d9-workers-0: "), said


async def test_ready_holds_the_room_for_the_workloads_own_pods(
    cluster: tuple[MemoryCluster, SchedulerRuntime, GangRuntime],
) -> None:
    memory, runtime, gangs = cluster
    wl = workload("held", ("main", 1, 8))
    verdict = decide(what_if(runtime, gangs), wl)
    assert verdict.state == "Ready"
    reserve(runtime.scheduler.nominations, wl, verdict)
    (where,) = verdict.nodes["main"]
    # Another workload's check now sees that node taken.
    other = decide(what_if(runtime, gangs), workload("other", ("main", 2, 8)))
    assert other.state == "Pending", other.message
    # A pod of the same priority, not of the group, cannot take the held node.
    memory.create_pod(pod("stranger", gpus=8, node_selector={"kubernetes.io/hostname": where}))
    await runtime.settle()
    assert node_of(memory, "stranger") is None
    # The workload's pod, labelled as Kueue writes the check's podSetUpdates, binds there.
    (update,) = pod_set_updates(wl, verdict)
    assert update["labels"] == {PLACEMENT_GROUP: "held"}
    memory.create_pod(pod("held-pod", gpus=8, labels=update["labels"]))
    await eventually(lambda: node_of(memory, "held-pod"), what="held-pod bound", timeout_s=10)
    assert node_of(memory, "held-pod") == where
    assert runtime.scheduler.nominations.reserved("default/held") == []
