"""A Job's pod group on the real control plane (kube-controller-manager's Job controller makes the
pods): group labels the user writes on the pod template win, even named after the Job; a Job
scaled up after its group bound places its new pod beside the running ones; and a group declared
on the Job's own metadata (not its template) makes its pods one gang, a bad minimum there stopping
only that Job's pods, named.

Fleet: racks ``a`` and ``b`` (label ``example.com/rack``) of two idle 8-GPU DGX A100 nodes each;
the Job asks for its whole group in one rack (``topos.io/gang-topology``), as on the playground.
The group declared on the Job runs on two nodes with no racks, as the user's trial did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from devcluster.kube_wait import wait_for_pods
from tests.support.gang_cluster import GangCluster
from tests.support.workloads import JOBS, apply, gpu_job, pods_of

RACK = "example.com/rack"


async def racks(cluster: GangCluster) -> dict[str, str]:
    """Node → rack: a/a/b/b."""
    rack_of = {}
    for short, rack in (("a0", "a"), ("a1", "a"), ("b0", "b"), ("b1", "b")):
        rack_of[await cluster.add_node(short, "dgx-a100", labels_extra={RACK: rack})] = rack
    return rack_of


def job(name: str, parallelism: int, gpus: int, labels: Mapping[str, str] = {}) -> str:
    """A Job of ``parallelism`` pods (no completions: each pod runs until it is done, and the
    parallelism may be changed) whose group stays in one rack."""
    annotations = {"topos.io/gang-topology": RACK}
    return gpu_job(
        name, annotations, gpus, parallelism=parallelism, completions=False, labels=labels
    )


async def bound_count(cluster: GangCluster, selector: str, count: int) -> dict[str, str]:
    """Pod name → node of the bound pods matching ``selector``, once ``count`` of them are."""

    def placed(pods: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
        found = {k: str(v) for k, v in nodes.items() if v}
        return found if len(found) >= count else None

    return await wait_for_pods(
        cluster.kube,
        cluster.namespace,
        placed,
        label_selector=selector,
        what=f"{count} bound pods matching {selector}",
    )


async def test_group_labels_on_the_template_named_after_the_job_keep_their_minimum(
    cluster: GangCluster,
) -> None:
    """``topos.io/gang: train`` and ``gang-min: "2"`` on the template of Job ``train`` at
    parallelism 3: the minimum stays 2 (it was made 3, the parallelism, and 3 × 8 GPUs fit in
    no rack), so two pods bind together in one rack."""
    rack_of = await racks(cluster)
    labels = {"topos.io/gang": "train", "topos.io/gang-min": "2"}
    async with cluster.gang_coordinator():
        await apply(cluster, job("train", 3, gpus=8, labels=labels))
        placed = await bound_count(cluster, "job-name=train", 2)
        pods = await pods_of(cluster, "job-name=train", 3)
    assert len(placed) == 2, placed
    assert len({rack_of[node] for node in placed.values()}) == 1, placed
    for pod in pods:
        assert pod["metadata"]["labels"]["topos.io/gang-min"] == "2", pod["metadata"]
        # Inherited from the Job: its key, not the group the user wrote.
        assert pod["metadata"]["annotations"]["topos.io/inherited"] == "topos.io/gang-topology"


async def test_a_job_scaled_up_after_its_group_bound_places_its_new_pod(
    cluster: GangCluster,
) -> None:
    """The group of a Job at parallelism 2 (minimum 2, inherited) bound; the Job then runs 3
    pods. The new one declares minimum 3, the bound ones still say 2: it joins the running group
    in its rack (it waited for ever, "members disagree on the minimum", before)."""
    rack_of = await racks(cluster)
    async with cluster.gang_coordinator():
        await apply(cluster, job("grow", 2, gpus=4))
        first = await cluster.all_bound("job-name=grow", 2)
        await cluster.kube.patch(
            JOBS, "grow", {"spec": {"parallelism": 3}}, namespace=cluster.namespace
        )
        placed = await cluster.all_bound("job-name=grow", 3)
        pods = {p["metadata"]["name"]: p for p in await pods_of(cluster, "job-name=grow", 3)}
    (new,) = set(placed) - set(first)
    assert {rack_of[node] for node in placed.values()} == {rack_of[placed[new]]}, placed
    mins = {name: pod["metadata"]["labels"]["topos.io/gang-min"] for name, pod in pods.items()}
    assert mins == {**dict.fromkeys(first, "2"), new: "3"}, mins


def labelled_job(name: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The user's trial: a Job of 3 pods of 8 GPUs each, its group keys on the Job itself."""
    manifest = yaml.safe_load(gpu_job(name, annotations, 8, parallelism=3))
    manifest["metadata"]["labels"] = dict(labels)
    return yaml.safe_dump(manifest)


async def test_a_group_declared_on_the_job_waits_whole_and_times_out_as_a_pod_gang(
    cluster: GangCluster,
) -> None:
    """Label ``topos.io/gang: onjob`` and annotation ``gang-min: "3"`` on a Job of 3 × 8 GPUs,
    two 8-GPU nodes: no pod binds (two bound at once and the third later, before), the pods
    say their group needs 3 and the nodes hold 2, and the timeout on the Job releases the group
    with the pod gang's Event. (The trial's timeout was 30s; 2s keeps the test short.)"""
    for short in ("n0", "n1"):
        await cluster.add_node(short, "dgx-a100")
    annotations = {"topos.io/gang-min": "3", "topos.io/gang-timeout": "2s"}
    async with cluster.gang_coordinator():
        await apply(cluster, labelled_job("trial", {"topos.io/gang": "onjob"}, annotations))
        pods = await pods_of(cluster, "job-name=trial", 3)
        first = pods[0]["metadata"]["name"]
        message = await cluster.condition(first, "nodes are available")
        timeout = await cluster.event("GangTimeout", name=first)
        placement = await cluster.placement("job-name=trial")
        marked = await pods_of(cluster, "topos.io/gang=onjob,topos.io/gang-min=3", 3)
    assert message.startswith("waiting for pod group onjob: 0/3 members placed; 0/2 nodes"), message
    assert "24 nvidia.com/gpu" in message, message  # the group's 3 × 8 against 2 × 8 free
    assert timeout["message"] == "pod group onjob timed out after 2s: 0/3 members placed"
    assert set(placement.values()) == {None}, placement
    for pod in marked:
        inherited = pod["metadata"]["annotations"]["topos.io/inherited"]
        assert inherited == "topos.io/gang,topos.io/gang-min,topos.io/gang-timeout", inherited


async def test_a_bad_minimum_on_the_job_stops_only_its_pods_and_says_so(
    cluster: GangCluster,
) -> None:
    """``gang-min: "zero"`` on one Job, ``"4"`` on another of parallelism 3 (it would wait for
    ever): their pods wait with the key and value named, as a pod's own label would be; a third
    Job's group beside them binds. The first Job fixed, its pods become a gang of 3."""
    for short in ("n0", "n1", "n2"):
        await cluster.add_node(short, "dgx-a100")
    gang = {"topos.io/gang": "g"}
    async with cluster.gang_coordinator():
        await apply(cluster, labelled_job("zero", gang, {"topos.io/gang-min": "zero"}))
        await apply(cluster, labelled_job("four", gang, {"topos.io/gang-min": "4"}))
        await apply(cluster, labelled_job("fine", gang, {}))
        placed = await cluster.all_bound("job-name=fine", 3)
        zero = (await pods_of(cluster, "job-name=zero", 3))[0]["metadata"]["name"]
        four = (await pods_of(cluster, "job-name=four", 3))[0]["metadata"]["name"]
        field = f"invalid Job {cluster.namespace}/%s metadata.annotations[topos.io/gang-min]: "
        bad_count = await cluster.condition(zero, field % "zero")
        event = await cluster.warning(zero)
        too_many = await cluster.condition(four, field % "four")
        waiting = await cluster.placement("job-name in (zero,four)")
        # Fixed on the Job: its pods lose the error and wait as a gang of 3 (no room left).
        fix = {"metadata": {"annotations": {"topos.io/gang-min": "3"}}}
        await cluster.kube.patch(JOBS, "zero", fix, namespace=cluster.namespace)
        fixed = await cluster.condition(zero, "waiting for pod group g: 0/3 members placed")
        (pod,) = [
            p for p in await pods_of(cluster, "job-name=zero", 3) if p["metadata"]["name"] == zero
        ]
    assert len(set(placed.values())) == 3, placed
    assert "must be a whole number from 1 to 10000, got 'zero'" in bad_count, bad_count
    assert field % "zero" in event["message"], event["message"]
    assert (
        f"the group would wait for ever: Job {cluster.namespace}/four runs at most 3 pod(s) "
        "at once, got '4'"
    ) in too_many, too_many
    assert set(waiting.values()) == {None}, waiting
    assert "invalid" not in fixed, fixed
    assert pod["metadata"]["labels"]["topos.io/gang-min"] == "3", pod["metadata"]
    assert "topos.io/gang-error" not in pod["metadata"]["annotations"], pod["metadata"]
