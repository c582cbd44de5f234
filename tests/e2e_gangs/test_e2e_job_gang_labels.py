"""A Job's pod group on the real control plane (kube-controller-manager's Job controller makes the
pods): group labels the user writes on the pod template win, even named after the Job, and a Job
scaled up after its group bound places its new pod beside the running ones.

Fleet: racks ``a`` and ``b`` (label ``example.com/rack``) of two idle 8-GPU DGX A100 nodes each;
the Job asks for its whole group in one rack (``topos.io/gang-topology``), as on the playground.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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
