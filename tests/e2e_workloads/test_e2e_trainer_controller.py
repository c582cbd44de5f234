"""Kubeflow Trainer v2.0.0, built from its module, on the real control plane, running on JobSet
v0.10.1 as it does in a cluster: a TrainJob on the ``torch-distributed`` runtime of Trainer's
manifests. Trainer makes a JobSet, JobSet the Jobs, the Job controller the pods, and Topos binds
them, each with the GPU the TrainJob asks per node.

A TrainJob has no field for the scheduler (``podSpecOverrides`` carries none in v2.0.0): the
runtime's pod template does. So the test copies the module's ``torch-distributed``
ClusterTrainingRuntime into a namespaced TrainingRuntime with ``schedulerName: topos`` added,
as a cluster administrator would.
"""

from __future__ import annotations

import pytest
import yaml

from common.kube import KubeError
from devcluster.kube_wait import wait_for
from devcluster.workloads.build import Built
from devcluster.workloads.launch import resource_for
from devcluster.workloads.manifests import crds, documents
from tests.support.gang_cluster import Controllers, GangCluster
from tests.support.gpu_cluster import assignment
from tests.support.workload_controllers import JOBSETS, TRAIN_JOBS, TRAINING_RUNTIMES
from tests.support.workload_examples import RUNTIME_FILE, TRAIN_JOB, topos_runtime
from tests.support.workload_runs import GANG, all_waiting, hold_gpus, release, runs


async def test_trainjob_on_torch_runtime_pods_made_through_jobset_and_bound_by_topos(
    trainer_controller: Built, cluster: GangCluster
) -> None:
    # The harness installed the module's ClusterTrainingRuntime (vetted by Trainer's webhook).
    (shipped,) = documents(trainer_controller.module / RUNTIME_FILE)
    installed = await cluster.kube.get(
        resource_for(shipped, crds(trainer_controller.controller, trainer_controller.module)),
        "torch-distributed",
    )
    assert installed["spec"]["mlPolicy"]["torch"]["numProcPerNode"] == "auto"

    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    await cluster.kube.create(
        TRAINING_RUNTIMES, topos_runtime(trainer_controller), namespace=cluster.namespace
    )
    async with cluster.gang_coordinator():
        await cluster.kube.create(
            TRAIN_JOBS, yaml.safe_load(TRAIN_JOB), namespace=cluster.namespace
        )
        placed = await cluster.all_bound("jobset.sigs.k8s.io/jobset-name=pytorch-simple", 2)
    assert set(placed.values()) <= set(nodes)
    for pod in await cluster.pods("jobset.sigs.k8s.io/jobset-name=pytorch-simple"):
        _, gpus, _ = assignment(pod)
        assert len(gpus) == 1, pod["metadata"].get("annotations")
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        # Trainer's torch plugin wrote the distributed environment from the TrainJob.
        assert env["PET_NNODES"] == "2", env
        assert pod["spec"]["schedulerName"] == "topos"


async def test_trainers_webhook_refuses_a_trainjob_name_it_cannot_use(
    trainer_controller: Built, cluster: GangCluster
) -> None:
    bad = yaml.safe_load(TRAIN_JOB)
    bad["metadata"]["name"] = "9-lives"  # a valid object name, not an RFC 1035 label
    with pytest.raises(KubeError) as refused:
        await cluster.kube.create(TRAIN_JOBS, bad, namespace=cluster.namespace)
    # Only Trainer's validating webhook has this rule: the API server called it on loopback.
    message = str(refused.value)
    assert "validator.trainjob.trainer.kubeflow.org" in message, message
    assert 'metadata.name: Invalid value: "9-lives"' in message, message
    assert (await cluster.kube.list(TRAIN_JOBS, namespace=cluster.namespace))["items"] == []


async def test_trainjob_is_all_or_nothing_and_applied_again_is_a_new_run(
    trainer_controller: Built, cluster: GangCluster
) -> None:
    """The TrainJob's two nodes are one gang through its JobSet: with one GPU free, neither
    binds; the GPU freed, both bind. Deleted and applied again under its name, it is a new run
    (a new JobSet) that binds again."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    await cluster.kube.create(
        TRAINING_RUNTIMES, topos_runtime(trainer_controller), namespace=cluster.namespace
    )
    selector = "jobset.sigs.k8s.io/jobset-name=pytorch-simple"
    async with cluster.gang_coordinator(), Controllers(cluster):
        await hold_gpus(cluster, "someone-else", 7)
        await cluster.kube.create(
            TRAIN_JOBS, yaml.safe_load(TRAIN_JOB), namespace=cluster.namespace
        )
        waiting = await all_waiting(cluster, selector, 2)
        assert {p["metadata"]["labels"][GANG] for p in waiting} == {"pytorch-simple"}
        await release(cluster, "someone-else")
        await cluster.all_bound(selector, 2)
        first = runs(await cluster.pods(selector))
        # `kubectl delete trainjob` (in the background): the TrainJob goes at once, then the
        # garbage collector takes its JobSet, the JobSet's Jobs and their pods. Not Foreground:
        # Trainer v2.0.0 reconciles a TrainJob being deleted like any other and applies its
        # JobSet again whenever the collector has taken it, so the TrainJob, waiting for its
        # dependents, could wait for minutes (seen once in a full run: 120 s).
        await cluster.kube.delete(
            TRAIN_JOBS,
            "pytorch-simple",
            namespace=cluster.namespace,
            propagation_policy="Background",
        )
        for resource, what in ((TRAIN_JOBS, "the TrainJob gone"), (JOBSETS, "its JobSet gone")):
            await wait_for(
                cluster.kube,
                resource,
                lambda found: True if not found else None,
                namespace=cluster.namespace,
                name="pytorch-simple",
                what=what,
            )
        await cluster.none_left(selector)
        await cluster.kube.create(
            TRAIN_JOBS, yaml.safe_load(TRAIN_JOB), namespace=cluster.namespace
        )
        await cluster.all_bound(selector, 2)
        second = runs(await cluster.pods(selector))
    assert len(first) == len(second) == 1, (first, second)
    assert first != second
