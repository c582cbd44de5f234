"""``POST /v1/whatif`` over a scheduler running on an in-memory cluster with its gang runtime
(preemption on): a Job that fits is shown where each pod goes (node, GPUs, link, NUMA, leaf); a
JobSet that does not fit gets the words its pods' FailedScheduling would carry and the changes
that make it fit, ranked, each tried; a cordoned node is named to bring back; bad input is a 400
naming the key and value; and nothing of the live scheduler changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.api.explain import SCHEDULER, SchedulerSlot
from coordinator.api.whatif import ROUTES, WHATIF, WhatIfSlot
from coordinator.app.scheduler import what_if
from coordinator.app.web import build_app
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.dra import claim, claim_pod, gpu_class, memory_dra_node

Client = TestClient[Any, Any]
DGX = discover_profile("dgx-a100", hostname="n0")


def job(
    name: str, *, pods: int, gpus: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "spec": {
                    "schedulerName": "topos",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                }
            },
        },
    }


def jobset(name: str, *, replicas: int, pods: int, gpus: int, locality: str) -> dict[str, Any]:
    template = job("unused", pods=pods, gpus=gpus)
    template["spec"]["template"]["metadata"] = {
        "labels": {"topos.io/gang": name, "topos.io/gang-min": str(replicas * pods)},
        "annotations": {"topos.io/gpu-locality": locality},
    }
    template["spec"]["template"]["spec"]["priority"] = 1000
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": replicas, "template": {"spec": template["spec"]}}
            ]
        },
    }


@pytest.fixture
async def api(aiohttp_client: Any) -> AsyncIterator[tuple[Client, MemoryCluster, SchedulerRuntime]]:
    inventory = Inventory()
    cluster = MemoryCluster(inventory)
    for i in range(4):  # DGX A100s: 8 GPUs on NVSwitch; two leaves
        cluster.add_node(
            f"n{i}",
            labels={"topos.io/leaf": f"leaf-{i // 2 + 1}", "topos.io/spine": "spine-1"},
            topology=discover_profile("dgx-a100", hostname=f"n{i}"),
        )
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings())
    app = build_app(inventory, extra_routes=ROUTES)
    app[SCHEDULER] = SchedulerSlot(runtime.scheduler)
    app[WHATIF] = WhatIfSlot(what_if(runtime, gangs))
    client = await aiohttp_client(app)
    async with gangs, runtime:
        yield client, cluster, runtime


def _with(doc: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**doc, "spec": {**doc["spec"], **spec}}


async def _whatif(
    client: Client, *documents: dict[str, Any], status: int = 200, budget_s: float | None = 1.0
) -> Any:
    resp = await client.post(
        "/v1/whatif", json={"documents": list(documents), "budget_s": budget_s}
    )
    body = await resp.json()
    assert resp.status == status, body
    return body


async def _fill(
    cluster: MemoryCluster,
    runtime: SchedulerRuntime,
    name: str,
    *,
    gpus: int,
    priority: int | None = None,
) -> None:
    """A running pod ``<name>-<i>`` of ``gpus`` GPUs on every node ``n<i>`` (namespace batch)."""
    for i in range(4):
        cluster.create_pod(
            pod(
                f"{name}-{i}",
                gpus=gpus,
                namespace="batch",
                priority=priority,
                node_selector={"kubernetes.io/hostname": f"n{i}"},
            )
        )
    await runtime.settle()


async def test_a_job_that_fits_is_shown_where_each_pod_goes(api: Any) -> None:
    client, _cluster, _runtime = api
    doc = await _whatif(
        client, job("train", pods=2, gpus=8, annotations={"topos.io/placement": "consolidated"})
    )
    assert doc["fits"] is True
    assert doc["workloads"] == [{"kind": "Job", "namespace": "ml", "name": "train", "pods": 2}]
    # A Job asking for a placement is one pod group (it inherits topos.io/gang from its Job)
    (unit,) = doc["units"]
    assert unit["unit"] == "pod group ml/train"
    assert unit["pods"] == ["ml/train-0", "ml/train-1"]
    assert unit["message"].startswith("would go to n")
    placements = unit["placements"]
    assert {p["pod"] for p in placements} == {"ml/train-0", "ml/train-1"}
    assert len({p["node"] for p in placements}) == 2
    for p in placements:
        assert p["gpu_indices"] == list(range(8))
        assert len(p["gpus"]) == 8
        assert p["link"] == "NVSwitch"
        assert sorted(p["numa"]) == sorted({g.numa_node for g in DGX.gpus})
        assert p["domain"]["spine"] == "spine-1"
    # consolidated: both on one leaf
    assert len({p["domain"]["leaf"] for p in placements}) == 1
    assert "suggestions" not in doc
    assert doc["predicted_start_s"] == 0  # it fits now: it starts now, waiting for nobody
    assert doc["waits_for"] == []


async def test_a_jobset_that_does_not_fit_gets_reasons_and_ranked_changes(api: Any) -> None:
    client, cluster, runtime = api
    # Low-priority pods hold 6 GPUs of every node: 2 free per node, on one NUMA node each
    await _fill(cluster, runtime, "low", gpus=6, priority=0)
    queue_before = len(runtime.scheduler.queue)
    attempts_before = runtime.scheduler.stats.attempts
    pods_before = sorted(p["metadata"]["name"] for p in cluster.pods())
    events_before = len(cluster.events())
    # no time limit: this asks which changes are found and how they rank, not how fast (the
    # default 1 s budget can leave "preempt" untried on a loaded machine; a test below names it)
    big = jobset("big", replicas=2, pods=2, gpus=4, locality="nvlink")
    doc = await _whatif(client, big, budget_s=None)
    assert doc["fits"] is False
    assert doc["workloads"][0]["pods"] == 4
    (unit,) = doc["units"]
    assert unit["unit"] == "pod group ml/big"
    assert unit["pods"] == [
        "ml/big-workers-0-0",
        "ml/big-workers-0-1",
        "ml/big-workers-1-0",
        "ml/big-workers-1-1",
    ]
    assert unit["message"].startswith("waiting for pod group big: 0/4 members placed; ")
    kinds = [s["kind"] for s in doc["suggestions"]]
    ranks = [s["rank"] for s in doc["suggestions"]]
    assert ranks == list(range(1, len(ranks) + 1))
    # 2 GPUs free per node: 2 per pod fits, and so does preempting the low-priority pods
    assert "fewer-gpus" in kinds
    assert "preempt" in kinds
    assert kinds.index("fewer-gpus") < kinds.index("preempt")
    fewer = doc["suggestions"][kinds.index("fewer-gpus")]
    assert fewer["change"] == {"nvidia.com/gpu": "2"}
    assert fewer["summary"] == "ask for 2 GPUs per pod instead of 4"
    assert len(fewer["placements"]) == 4
    assert all(len(p["gpus"]) == 2 for p in fewer["placements"])
    preempt = doc["suggestions"][kinds.index("preempt")]
    victims = {v["pod"] for v in preempt["victims"]}
    assert victims
    assert victims <= {f"batch/low-{i}" for i in range(4)}
    assert all(v["priority"] == 0 for v in preempt["victims"])
    assert len(preempt["placements"]) == 4  # tried: with those gone, the JobSet fits
    # the live scheduler is untouched: no pod, queue entry, assumption or eviction
    assert sorted(p["metadata"]["name"] for p in cluster.pods()) == pods_before
    assert len(runtime.scheduler.queue) == queue_before
    assert runtime.scheduler.view.assumed_count == 0
    assert len(cluster.events()) == events_before  # no Preempted/Preempting Event either
    assert runtime.scheduler.stats.attempts == attempts_before


async def test_a_jobset_naming_no_gang_is_placed_whole_as_the_scheduler_would(api: Any) -> None:
    """Topos gangs a JobSet's pods without any gang label (docs/gangs.md, "Gangs from workload
    controllers"): 3 pods of 8 GPUs where 2 nodes are free wait together, none placed alone."""
    client, cluster, runtime = api
    plain = jobset("plain", replicas=3, pods=1, gpus=8, locality="any")
    template = plain["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    del template["metadata"]["labels"]
    assert (await _whatif(client, plain))["units"][0]["unit"] == "pod group ml/plain"
    cluster.create_pod(pod("a", gpus=8, node_selector={"kubernetes.io/hostname": "n0"}))
    cluster.create_pod(pod("b", gpus=8, node_selector={"kubernetes.io/hostname": "n1"}))
    await runtime.settle()
    doc = await _whatif(client, plain)
    assert doc["fits"] is False
    (unit,) = doc["units"]
    assert unit["unit"] == "pod group ml/plain"
    assert unit["pods"] == [f"ml/plain-workers-{j}-0" for j in range(3)]
    assert unit["message"].startswith("waiting for pod group plain: 0/3 members placed; ")
    assert "placements" not in unit  # not two of them placed, the third left waiting


async def test_a_relaxed_locality_ranks_before_fewer_gpus(api: Any) -> None:
    """Same-socket on a DGX A100 means one NUMA node, which holds two GPUs: three never fit."""
    client, _cluster, _runtime = api
    three = pod(
        "solo", gpus=3, namespace="ml", annotations={"topos.io/gpu-locality": "same-socket"}
    )
    doc = await _whatif(client, {**three, "apiVersion": "v1", "kind": "Pod"})
    assert doc["fits"] is False
    (unit,) = doc["units"]
    assert unit["unit"] == "pod ml/solo"
    assert unit["message"] == "0/4 nodes are available: 4 node(s) had no free GPUs on one socket."
    assert unit["reasons"] == {"node(s) had no free GPUs on one socket": 4}
    first, second = doc["suggestions"]
    assert first["kind"] == "relax-locality"
    assert first["change"] == {"topos.io/gpu-locality": "same-node"}
    assert first["summary"] == "ask for topos.io/gpu-locality: same-node instead of same-socket"
    assert len(first["placements"][0]["gpus"]) == 3
    assert second["kind"] == "fewer-gpus"
    assert second["change"] == {"nvidia.com/gpu": "2"}
    assert (first["rank"], second["rank"]) == (1, 2)


async def test_a_cordoned_node_is_named_to_bring_back(api: Any) -> None:
    client, cluster, runtime = api
    await _fill(cluster, runtime, "full", gpus=8, priority=5000)
    cluster.add_node(
        "spare",
        labels={"topos.io/leaf": "leaf-3"},
        topology=discover_profile("dgx-a100", hostname="spare"),
        unschedulable=True,
    )
    doc = await _whatif(client, {**pod("one", gpus=8), "apiVersion": "v1", "kind": "Pod"})
    assert doc["fits"] is False
    assert "node(s) were unschedulable" in doc["units"][0]["reasons"]
    (back,) = [s for s in doc["suggestions"] if s["kind"] == "uncordon"]
    assert back["nodes"] == ["spare"]
    assert back["summary"] == "bring back spare (cordoned)"
    assert back["placements"][0]["node"] == "spare"
    assert not any(s["kind"] == "preempt" for s in doc["suggestions"])  # priority 0 < 5000


async def test_bad_input_is_a_400_naming_the_key_and_value(api: Any) -> None:
    client, _cluster, runtime = api
    cases = [
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
            "kind: cannot expand apiVersion 'apps/v1' kind 'Deployment'",
        ),
        (
            _with(job("j", pods=1, gpus=1), parallelism="two"),
            "Job ml/j: spec.parallelism: must be a whole number of at least 0, not 'two'",
        ),
        (
            _with(job("j", pods=1, gpus=1), template={}),
            "Job ml/j: spec.template.spec: is required (a mapping), got None",
        ),
        (
            {**job("j", pods=1, gpus=1), "metadata": {"namespace": "ml"}},
            "documents[0]: metadata.name: is required, got None",
        ),
    ]
    for document, expected in cases:
        body = await _whatif(client, document, status=400)
        assert body["error"] == "bad-request"
        assert expected in body["message"], body["message"]
    bad = {
        **pod("typo", gpus=1, annotations={"topos.io/gpu-locality": "nvlnk"}),
        "apiVersion": "v1",
        "kind": "Pod",
    }
    body = await _whatif(client, bad, status=400)
    assert body["message"] == (
        "pod default/typo: invalid metadata.annotations[topos.io/gpu-locality]: unknown value "
        "'nvlnk' (expected nvlink | same-socket | same-node | any)"
    )
    for raw in (b"not json", b'{"documents": 3}'):
        resp = await client.post("/v1/whatif", data=raw)
        assert resp.status == 400
    # the scheduler is still fine: a good request after the bad ones is answered
    ok = await _whatif(client, job("after", pods=1, gpus=1))
    assert ok["fits"] is True
    assert len(runtime.scheduler.queue) == 0


async def test_a_yaml_manifest_with_a_podgroup_and_its_pods(api: Any) -> None:
    client, _cluster, _runtime = api
    manifest = [
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {"minMember": 3},
        },
        *(
            {
                **pod(
                    f"pg-{i}",
                    gpus=8,
                    namespace="ml",
                    labels={"scheduling.x-k8s.io/pod-group": "pg"},
                ),
                "apiVersion": "v1",
                "kind": "Pod",
            }
            for i in range(3)
        ),
    ]
    text = yaml.safe_dump_all(manifest)
    resp = await client.post(
        "/v1/whatif", data=text.encode(), headers={"Content-Type": "application/yaml"}
    )
    doc = await resp.json()
    assert resp.status == 200, doc
    assert doc["fits"] is True
    (unit,) = doc["units"]
    assert unit["unit"] == "pod group ml/pg"
    assert len({p["node"] for p in unit["placements"]}) == 3


async def test_whatif_answers_503_without_a_scheduler(aiohttp_client: Any) -> None:
    app = build_app(Inventory(), extra_routes=ROUTES)
    app[WHATIF] = WhatIfSlot()
    client = await aiohttp_client(app)
    resp = await client.post("/v1/whatif", json={"documents": []})
    assert resp.status == 503


async def test_suggestions_not_tried_within_the_budget_are_named(api: Any) -> None:
    client, cluster, runtime = api
    await _fill(cluster, runtime, "low", gpus=6)
    big = jobset("big", replicas=2, pods=2, gpus=4, locality="nvlink")
    resp = await client.post("/v1/whatif", json={"documents": [big], "budget_s": 0})
    doc = await resp.json()
    assert resp.status == 200, doc
    assert doc["fits"] is False
    assert "suggestions" not in doc
    assert doc["not_tried"] == ["relax-locality", "fewer-gpus", "preempt"]
    assert doc["notes"][-1] == (
        "not tried within the 0 s budget: relax-locality, fewer-gpus, preempt "
        "(ask with a larger budget_s for them)"
    )
    unlimited = await _whatif(client, big, budget_s=600)  # 1 s may not be enough under load
    assert "not_tried" not in unlimited
    assert {s["kind"] for s in unlimited["suggestions"]} >= {"fewer-gpus", "preempt"}
    resp = await client.post("/v1/whatif", json={"documents": [big], "budget_s": -1})
    assert resp.status == 400
    assert (await resp.json())["message"] == (
        "budget_s: must be between 0 and 600 seconds, not -1.0"
    )


async def test_the_shape_mix_learns_nothing_from_a_whatif(api: Any) -> None:
    """The loop's cycles count every pod's shape into the mix fragmentation scores against; a
    what-if's cycles (its variants too) must not, or asking would change later placements."""
    client, _cluster, runtime = api
    framework = runtime.scheduler.profiles.default
    (gpu,) = [p for p in framework.plugins if getattr(p, "name", "") == "GpuTopology"]
    before = gpu.mix._shapes()
    doc = await _whatif(client, jobset("odd", replicas=3, pods=1, gpus=5, locality="nvlink"))
    assert doc["workloads"][0]["pods"] == 3
    assert gpu.mix._shapes() == before
    assert framework.next_start == 0
    # the same pod scheduled for real is counted: the comparison above can fail
    odd = {**pod("real", gpus=5), "apiVersion": "v1", "kind": "Pod"}
    from coordinator.core.framework.cycle import schedule_one
    from coordinator.core.podspec.parse import parse_pod

    schedule_one(parse_pod(odd), runtime.scheduler.view.snapshot().copy(), framework)
    gpu.mix._refresh()
    assert gpu.mix._shapes() != before


async def test_a_pod_with_a_resourceclaim_is_shown_the_dra_devices_it_would_get(
    aiohttp_client: Any,
) -> None:
    inventory = Inventory()
    cluster = MemoryCluster(inventory)
    memory_dra_node(cluster, "dgx-a", "dgx1-v100")
    cluster.dra.put("DeviceClass", gpu_class())
    cluster.dra.put("ResourceClaim", claim("wanted", 4, namespace="default"))
    runtime = memory_runtime(inventory, cluster)
    gangs = GangRuntime(runtime, settings=GangSettings())
    app = build_app(inventory, extra_routes=ROUTES)
    app[WHATIF] = WhatIfSlot(what_if(runtime, gangs))
    client = await aiohttp_client(app)
    async with gangs, runtime:
        user_pod = claim_pod(
            "uses-claim", claim_name="wanted", scheduler="topos", namespace="default"
        )
        doc = await _whatif(client, {**user_pod, "apiVersion": "v1", "kind": "Pod"})
    assert doc["fits"] is True
    (placement,) = doc["units"][0]["placements"]
    assert placement["node"] == "dgx-a"
    assert len(placement["dra"]) == 4
    assert all(d.startswith("wanted: gpu.nvidia.com/") for d in placement["dra"])
    # the claim is as it was: nothing allocated or reserved
    stored = cluster.dra.get("ResourceClaim", "default/wanted")
    assert stored is not None
    assert not (stored.get("status") or {}).get("allocation")


def _workload_gang(name: str, *, gpus: int, topology: str = "") -> list[dict[str, Any]]:
    """A Workload-API PodGroup of two and its two pods, as one manifest."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": spec,
    }
    members = [
        {
            **pod(
                f"{name}-{i}",
                gpus=gpus,
                namespace="ml",
                spec={"schedulingGroup": {"podGroupName": name}},
            ),
            "apiVersion": "v1",
            "kind": "Pod",
        }
        for i in range(2)
    ]
    return [group, *members]


async def test_a_podgroups_topology_constraint_bounds_the_what_if(api: Any) -> None:
    client, cluster, runtime = api
    await _fill(cluster, runtime, "low", gpus=4)  # 4 GPUs free on every node
    loose = await _whatif(client, *_workload_gang("loose", gpus=4))
    assert loose["fits"] is True
    (unit,) = loose["units"]
    assert len({p["node"] for p in unit["placements"]}) == 2
    # One node for the whole group: no node has 8 GPUs free.
    one = await _whatif(client, *_workload_gang("one", gpus=4, topology="kubernetes.io/hostname"))
    assert one["fits"] is False
    (unit,) = one["units"]
    assert "no kubernetes.io/hostname domain holds the whole group" in unit["message"], unit
    nowhere = await _whatif(client, *_workload_gang("nowhere", gpus=1, topology="example.com/row"))
    (unit,) = nowhere["units"]
    assert nowhere["fits"] is False
    assert (
        "PodGroup ml/nowhere (scheduling.k8s.io/v1alpha2) spec.schedulingConstraints.topology"
        "[0].key='example.com/row': no node carries the label 'example.com/row'"
    ) in unit["message"], unit
