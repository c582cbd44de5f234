"""Multi-tray gangs on GB200 NVL72 racks (real control plane): one NVLink clique when it fits,
a degraded tray avoided, and the Event and ``/v1/gangs`` name the clique.

Fleet: two racks of 18 ``gb200-nvl72`` trays (4 GPUs each) in one leaf, each rack its own clique
(``nvidia.com/gpu.clique``, GFD's ``<clusterUUID>.<cliqueId>``); tray 3 of rack 1 reports its
NVLink fabric degraded. Members ask for a whole tray (4 GPUs). Pods of one NVIDIA ComputeDomain
share a rack, gang or no gang; a ComputeDomain with a bad ``spec.numNodes`` gets a Warning Event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from common.kube import (
    DEVICE_CLASSES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    Resource,
)
from devcluster import pods
from devcluster.kube_wait import scheduled_message, wait_for_object
from tests.support.gang_cluster import (
    LEAF,
    SPINE,
    GangCluster,
    gang_pod,
    hold_trays,
    install_crd,
    pinned_pod,
    two_racks,
)
from tests.support.nvl72 import CLUSTER_UUID

CLIQUE = "nvidia.com/gpu.clique"
COMPUTE_DOMAINS = Resource(
    "resource.nvidia.com", "v1beta1", "computedomains", namespaced=True, kind="ComputeDomain"
)
CHANNEL_DRIVER = "compute-domain.nvidia.com"


async def test_an_18_tray_gang_takes_a_whole_rack_and_a_degraded_tray_is_avoided(
    cluster: GangCluster,
) -> None:
    slots = asyncio.Semaphore(8)
    rack_of: dict[str, int] = {}

    async def tray(rack: int, i: int) -> None:
        labels = {LEAF: "leaf-1", SPINE: "spine-1", CLIQUE: f"{CLUSTER_UUID}.{rack}"}
        if (rack, i) == (1, 3):
            labels["topos.io/gpu.fabric"] = "degraded"
        async with slots:
            name = await cluster.add_node(f"r{rack}-t{i:02d}", "gb200-nvl72", labels_extra=labels)
        rack_of[name] = rack

    await asyncio.gather(*(tray(r, i) for r in (1, 2) for i in range(1, 19)))
    degraded = next(n for n in rack_of if n.startswith("r1-t03-"))

    async def gang(name: str, size: int) -> dict[str, str]:
        for k in range(size):
            await cluster.create(gang_pod(f"{name}-{k}", name, size, gpus=4, cpu="8"))
        return await cluster.all_bound(f"topos.io/gang={name}", size)

    async with cluster.gang_coordinator() as coord:
        # 4 trays taken: the rack with fewer healthy trays is the tighter fit
        small = await gang("small", 4)
        assert {rack_of[n] for n in small.values()} == {1}
        # 18 trays: rack 1 has 13 left, so the whole of rack 2 — not 13 + 5 across racks
        big = await gang("big", 18)
        assert {rack_of[n] for n in big.values()} == {2}
        assert len(set(big.values())) == 18
        event = await cluster.event("GangScheduled", name="big-0")
        statuses = {s.name: s for s in coord.gangs.step.manager.statuses()}
        # 13 trays: rack 1's 13 healthy free trays, never the degraded one
        rest = await gang("rest", 13)
        assert {rack_of[n] for n in rest.values()} == {1}
        assert degraded not in set(rest.values()) | set(small.values())
    why = (
        f"clique {CLUSTER_UUID}.2 (18 nodes, balanced); "
        "inside one NVLink clique (nvidia.com/gpu.clique): 1 of 2 cliques could hold the group"
    )
    assert event["message"] == f"pod group big: 18/18 members bound on {why}"
    assert statuses["big"].placement == why  # GET /v1/gangs/{namespace}/big


@contextlib.asynccontextmanager
async def channels(cluster: GangCluster, nodes: list[str]) -> AsyncIterator[str]:
    """What NVIDIA's DRA driver publishes for ComputeDomains: a channel DeviceClass (named for
    this run) and one IMEX channel device per tray; removed afterwards. Yields the class."""
    cls = f"compute-domain-channel-{cluster.run}.nvidia.com"
    selector = f"device.driver == '{CHANNEL_DRIVER}'"
    await cluster.kube.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": selector}}]},
        },
    )
    slices = []
    for node in nodes:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-channels"},
            "spec": {
                "driver": CHANNEL_DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"}}}],
            },
        }
        slices.append((await cluster.kube.create(RESOURCE_SLICES, body))["metadata"]["name"])
    try:
        yield cls
    finally:
        for name in slices:
            await cluster.kube.delete(RESOURCE_SLICES, name)
        await cluster.kube.delete(DEVICE_CLASSES, cls)


async def compute_domain(cluster: GangCluster, name: str, cls: str, num_nodes: int = 0) -> str:
    """A ComputeDomain and the channel ResourceClaimTemplate its controller would write; its
    UID."""
    template = f"{name}-channel"
    spec = {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": template}}}
    created = await cluster.kube.create(
        COMPUTE_DOMAINS,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name},
            "spec": spec,
        },
        namespace=cluster.namespace,
    )
    uid = str(created["metadata"]["uid"])
    config = {
        "requests": ["channel"],
        "opaque": {
            "driver": CHANNEL_DRIVER,
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomainChannelConfig",
                "domainID": uid,
                "allocationMode": "Single",
            },
        },
    }
    await cluster.kube.create(
        RESOURCE_CLAIM_TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": template},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "channel", "exactly": {"deviceClassName": cls}}],
                        "config": [config],
                    }
                }
            },
        },
        namespace=cluster.namespace,
    )
    return uid


def domain_pod(name: str, gang: str, size: int, template: str) -> dict[str, Any]:
    obj = gang_pod(name, gang, size, gpus=4, cpu="8")
    obj["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimTemplateName": template}]
    return obj


async def test_compute_domain_pods_share_one_rack_and_wait_rather_than_span_two(
    cluster: GangCluster, kubectl: Callable[..., Any]
) -> None:
    install_crd(kubectl, "computedomains.resource.nvidia.com")
    rack_of = await two_racks(cluster)
    async with channels(cluster, list(rack_of)) as cls, cluster.gang_coordinator():
        uid = await compute_domain(cluster, "imex", cls)
        # 5 trays of one ComputeDomain: no rack of 4 holds them, so they wait
        for k in range(5):
            await cluster.create(domain_pod(f"wide-{k}", "wide", 5, "imex-channel"))
        wanted = "no nvidia.com/gpu.clique domain holds the whole group (5 pods"
        pod = await wait_for_object(
            cluster.kube,
            PODS,
            "wide-0",
            lambda p: wanted in (scheduled_message(p, status="False") or ""),
            namespace=cluster.namespace,
        )
        assert "NVLink" not in str(pod["spec"].get("nodeName", ""))  # not bound anywhere
        await cluster.delete_pods("topos.io/gang=wide")
        await cluster.none_left("topos.io/gang=wide")
        # 3 trays of it: one rack
        for k in range(3):
            await cluster.create(domain_pod(f"imex-{k}", "imex", 3, "imex-channel"))
        try:
            placed = await cluster.all_bound("topos.io/gang=imex", 3, timeout_s=30)
        except AssertionError:
            for p in await cluster.pods("topos.io/gang=imex"):
                print("POD", p["metadata"]["name"], p.get("status"))
            for e in await cluster.events():
                print("EVENT", e["involvedObject"]["name"], e["reason"], e["message"])
            raise
        first = {rack_of[n] for n in placed.values()}
        assert len(first) == 1
        event = await cluster.event("GangScheduled", name="imex-0")
        assert f"ComputeDomain {uid}: its pods in one NVLink clique" in event["message"]
        # 1 more tray of the same domain joins its rack, though the other rack is emptier
        await cluster.create(domain_pod("late-0", "late", 1, "imex-channel"))
        late = await cluster.all_bound("topos.io/gang=late", 1)
        assert {rack_of[n] for n in late.values()} == first


def lone_domain_pod(name: str, gpus: int, template: str) -> dict[str, Any]:
    """A pod of a ComputeDomain that is no gang's member (a plain Job's pod)."""
    obj = pods.pod(name, namespace=None, gpus=gpus, cpu="8", labels={"job": name})
    obj["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimTemplateName": template}]
    return obj


async def test_lone_pods_of_a_compute_domain_created_one_after_another_share_a_rack(
    cluster: GangCluster, kubectl: Callable[..., Any]
) -> None:
    install_crd(kubectl, "computedomains.resource.nvidia.com")
    rack_of = await two_racks(cluster)
    async with channels(cluster, list(rack_of)) as cls, cluster.gang_coordinator():
        await compute_domain(cluster, "solo", cls)
        await cluster.create(lone_domain_pod("solo-a", 4, "solo-channel"))
        (first,) = (await cluster.all_bound("job=solo-a", 1)).values()
        # a 2-GPU pod on the other rack leaves a half-used tray there: where CliqueKeep and
        # best fit would put the domain's next 2-GPU pod, but its channel belongs with the first
        other = next(n for n, r in rack_of.items() if r != rack_of[first])
        await cluster.create(pinned_pod("plain", other, 2, {"job": "plain"}))
        assert (await cluster.all_bound("job=plain", 1)) == {"plain": other}
        await cluster.create(lone_domain_pod("solo-b", 2, "solo-channel"))
        (second,) = (await cluster.all_bound("job=solo-b", 1)).values()
        assert rack_of[second] == rack_of[first], (first, second)


async def test_the_first_pod_of_a_compute_domain_of_4_nodes_goes_where_4_trays_are_free(
    cluster: GangCluster, kubectl: Callable[..., Any]
) -> None:
    install_crd(kubectl, "computedomains.resource.nvidia.com")
    rack_of = await two_racks(cluster)
    async with channels(cluster, list(rack_of)) as cls, cluster.gang_coordinator():
        # two trays of rack 1 taken: rack 1 has 2 free trays, rack 2 has 4
        taken = sorted(n for n, r in rack_of.items() if r == 1)[:2]
        await hold_trays(cluster, taken)
        # numNodes 0 (unknown): only the pod that exists is counted, the tighter rack 1 taken
        await compute_domain(cluster, "unsized", cls)
        await cluster.create(lone_domain_pod("unsized-0", 4, "unsized-channel"))
        (one,) = (await cluster.all_bound("job=unsized-0", 1)).values()
        assert rack_of[one] == 1
        # numNodes 4: its first pod goes to rack 2, the one clique with 4 trays free for it
        await compute_domain(cluster, "sized", cls, num_nodes=4)
        await cluster.create(lone_domain_pod("sized-0", 4, "sized-channel"))
        (first,) = (await cluster.all_bound("job=sized-0", 1)).values()
        assert rack_of[first] == 2
        # numNodes -2 (the CRD's schema lets it through): a Warning Event on the ComputeDomain
        # names the field and the value, and its pod is placed as one of a domain of unknown size
        bad = await compute_domain(cluster, "negative", cls, num_nodes=-2)
        warning = await cluster.event("InvalidComputeDomain", name="negative")
        assert warning["type"] == "Warning"
        assert warning["involvedObject"]["kind"] == "ComputeDomain"
        assert warning["involvedObject"]["uid"] == bad
        assert "spec.numNodes: -2 is not a number of nodes (0 or more)" in warning["message"]
        await cluster.create(lone_domain_pod("negative-0", 4, "negative-channel"))
        await cluster.all_bound("job=negative-0", 1)
        # the other domains were not harmed: no Event about them
        assert not await cluster.events(name="sized", reason="InvalidComputeDomain")
