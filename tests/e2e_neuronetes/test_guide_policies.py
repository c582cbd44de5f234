"""The guide's cost, spot, carbon and cache pools on the real control plane, served by the
coordinator as it runs (``wire()``: the scheduler, the NeuroNetes controller with its policies,
the price table and the carbon intensity file of its configuration).

Each test makes its own nodes (labelled with this test's run, which the scheduler is told to
use), applies the guide's pool (plus a model and GPUs where the guide gives none) and plays the
kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from common.kube import EVENTS, NODES, PODS, KubeClient
from coordinator.adapters.kube.agentpools import AGENT_POOLS
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import LEADER
from coordinator.app.main import running, wire
from coordinator.neuronetes.decide.hooks import CLEAN_ENERGY_GATE
from devcluster.kube_wait import wait_for_event, wait_for_object, wait_for_pods
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster, Kubectl
from tests.support.neuronetes import Kubelet, controller, install_crds, shapes
from tests.support.polling import eventually

SPOT = {"karpenter.sh/capacity-type": "spot"}
ON_DEMAND = {"karpenter.sh/capacity-type": "on-demand"}


@contextlib.asynccontextmanager
async def _coordinator(
    kubeconfig: Path, cluster: GpuCluster, **sections: Any
) -> AsyncIterator[None]:
    raw: dict[str, Any] = {
        "scheduler": {"namespace": cluster.namespace, "nodeSelector": {RUN_LABEL: cluster.run}},
        "neuronetes": {"resyncSeconds": 0.5},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    app = wire(parse_config(raw), KubeBackend(str(kubeconfig)))
    async with running(app), Kubelet(cluster.kube, cluster.namespace):
        await asyncio.wait_for(app[LEADER].wait_until_leading(), 120)
        yield


def _guide(name: str, **spec: Any) -> dict[str, Any]:
    pool = copy.deepcopy(next(d for d in shapes() if d["metadata"]["name"] == name))
    pool["spec"].update(spec)
    return pool


async def _pods(kube: KubeClient, ns: str, pool: str, check: Any, what: str) -> Any:
    def live(pods: list[dict[str, Any]]) -> Any:
        return check([p for p in pods if not p["metadata"].get("deletionTimestamp")])

    return await wait_for_pods(
        kube, ns, live, label_selector=f"neuronetes.io/pool={pool}", what=what
    )


async def _status(kube: KubeClient, ns: str, pool: str, check: Any, what: str) -> dict[str, Any]:
    obj = await wait_for_object(
        kube, AGENT_POOLS, pool, lambda o: check(o.get("status") or {}), namespace=ns, what=what
    )
    return dict(obj["status"])


def _model(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["annotations"].get("neuronetes.io/model"))


async def test_cost_optimized_pool_falls_back_to_the_smaller_model_above_max_cost(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GpuCluster(kube, kubeconfig, namespace)
    big = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    for i in range(2):
        await cluster.add_node(f"p4d{i}", "dgx-a100", labels_extra=big)
    prices = {"prices": {"instanceTypes": {"p4d.24xlarge": 32.77}}}
    # Two replicas of 8 GPUs, each a whole p4d: $65.54/h against the guide's maxCostPerHour 50.
    pool = _guide(
        "cost-optimized-pool", model="big-model", replicas=2, gpuRequirements={"count": 8}
    )
    async with _coordinator(kubeconfig, cluster, scheduling=prices):
        await kube.create(AGENT_POOLS, pool, namespace=namespace)
        event = await wait_for_event(
            kube, namespace, reason="FallbackModel", name="cost-optimized-pool"
        )
        assert "above maxCostPerHour $50.00: switching to smaller-model" in event["message"]
        pods = await _pods(
            kube,
            namespace,
            "cost-optimized-pool",
            lambda ps: (
                ps
                if len(ps) == 2
                and all(_model(p) == "smaller-model" and p["spec"].get("nodeName") for p in ps)
                else None
            ),
            "two smaller-model pods bound",
        )
        assert pods[0]["spec"]["containers"][0]["args"] == ["--model", "smaller-model"]
        status = await _status(
            kube,
            namespace,
            "cost-optimized-pool",
            lambda s: (
                (s.get("policy") or {}).get("cost", {}).get("model") == "smaller-model"
                and s["policy"]["cost"]["action"] == "keep"
            ),
            "the fallback's cost measured",
        )
        cost = status["policy"]["cost"]
        assert (cost["maxCostPerHour"], cost["costPerHour"]) == (50.0, 65.54)
        assert "no cheaper option" in cost["reason"]  # still above; nothing cheaper left
        # The budget is raised well past the price: back to the pool's own model.
        patch = {"spec": {"scheduling": {"costOptimization": {"maxCostPerHour": 100.0}}}}
        await kube.patch(AGENT_POOLS, "cost-optimized-pool", patch, namespace=namespace)
        event = await wait_for_event(
            kube, namespace, reason="LargerModel", name="cost-optimized-pool"
        )
        assert "back to big-model from smaller-model" in event["message"]
        await _pods(
            kube,
            namespace,
            "cost-optimized-pool",
            lambda ps: ps if len(ps) == 2 and all(_model(p) == "big-model" for p in ps) else None,
            "two big-model pods",
        )


async def test_spot_pool_stops_using_spot_after_its_interruption_threshold(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GpuCluster(kube, kubeconfig, namespace)
    spot = [await cluster.add_node(f"spot{i}", "dgx-a100", labels_extra=SPOT) for i in range(3)]
    # The guide's spot pool, with a threshold of 2 and every replica allowed on spot.
    pool = _guide("spot-pool", replicas=1, gpuRequirements={"count": 8})
    cost = pool["spec"]["scheduling"]["costOptimization"]
    cost["spotStrategy"] = {"instanceTypes": ["p4d.24xlarge"], "maxSpotPercent": 100}
    cost["interruptionThreshold"]["count"] = 2

    def bound(ps: list[dict[str, Any]], avoid: set[str]) -> Any:
        nodes = [p["spec"].get("nodeName") for p in ps]
        return ps[0] if len(ps) == 1 and nodes[0] and nodes[0] not in avoid else None

    async with _coordinator(kubeconfig, cluster):
        await kube.create(AGENT_POOLS, pool, namespace=namespace)
        gone: set[str] = set()
        for _ in range(2):  # two spot nodes vanish under the pool's pod
            pod = await _pods(
                kube, namespace, "spot-pool", lambda ps: bound(ps, gone), "a bound spot pod"
            )
            node = pod["spec"]["nodeName"]
            assert node in spot
            await kube.delete(NODES, node)
            gone.add(node)
        event = await wait_for_event(kube, namespace, reason="InterruptionLimit", name="spot-pool")
        assert "2 spot interruption(s) in the last 1h (limit 2)" in event["message"]
        status = await _status(
            kube,
            namespace,
            "spot-pool",
            lambda s: (s.get("policy") or {}).get("spot", {}).get("enabled") is False,
            "spot disabled in status",
        )
        assert status["policy"]["spot"]["interruptions"] == 2
        # The replacement may not use the spot node left; an on-demand node takes it.
        od = await cluster.add_node("ondemand", "dgx-a100", labels_extra=ON_DEMAND)
        pod = await _pods(
            kube, namespace, "spot-pool", lambda ps: bound(ps, gone), "the pod on on-demand"
        )
        assert pod["spec"]["nodeName"] == od
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        expected = {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}
        assert all(expected in t["matchExpressions"] for t in terms)


def _hours(start: datetime.datetime, hours: int) -> str:
    end = start + datetime.timedelta(hours=hours)
    return f"{start:%H:%M}-{end:%H:%M}"


async def test_green_pool_waits_for_its_window_and_avoids_dirty_regions(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl, tmp_path: Path
) -> None:
    install_crds(kubectl)
    cluster = GpuCluster(kube, kubeconfig, namespace)
    region = "topology.kubernetes.io/region"
    dirty = await cluster.add_node("west", "dgx-a100", labels_extra={region: "us-west-2"})
    clean = await cluster.add_node("north", "dgx-a100", labels_extra={region: "eu-north-1"})
    source = tmp_path / "intensity.json"
    # Both preferred regions above maxCarbonIntensity 100 at first.
    source.write_text(json.dumps({"regions": {"us-west-2": 420, "eu-north-1": 250}}))
    now = datetime.datetime.now(datetime.UTC)
    shut = _hours(now + datetime.timedelta(hours=2), 2)  # a window that excludes now
    pool = _guide("green-pool")
    pool["spec"]["scheduling"]["carbonAware"]["timeShifting"]["cleanEnergyHours"] = shut
    carbon = {"carbonIntensity": {"source": str(source), "refreshSeconds": 0.5}}

    def held_because(text: str) -> Any:
        def check(s: dict[str, Any]) -> bool:
            carbon = (s.get("policy") or {}).get("carbon", {})
            return carbon.get("held") is True and text in carbon.get("reason", "")

        return check

    async with _coordinator(kubeconfig, cluster, neuronetes=carbon):
        await kube.create(AGENT_POOLS, pool, namespace=namespace)
        held = await _pods(kube, namespace, "green-pool", lambda ps: ps or None, "a held pod")
        assert held[0]["spec"]["schedulingGates"] == [{"name": CLEAN_ENERGY_GATE}]
        status = await _status(
            kube,
            namespace,
            "green-pool",
            lambda s: (
                held_because(f"until the clean-energy window {shut} opens")(s)
                and any(c["type"] == "CarbonIntensityAvailable" for c in s.get("conditions") or ())
            ),
            "held outside the window, the readings in",
        )
        conds = {c["type"]: c for c in status["conditions"]}
        assert conds["CleanEnergyWindow"]["status"] == "False"
        assert conds["CarbonIntensityAvailable"]["status"] == "True"
        # The window is moved over now; every preferred region is still too dirty: held.
        open_now = _hours(now - datetime.timedelta(hours=1), 3)
        patch = {
            "spec": {
                "scheduling": {"carbonAware": {"timeShifting": {"cleanEnergyHours": open_now}}}
            }
        }
        await kube.patch(AGENT_POOLS, "green-pool", patch, namespace=namespace)
        status = await _status(
            kube,
            namespace,
            "green-pool",
            held_because("every preferred region is above maxCarbonIntensity 100"),
            "held for dirty regions",
        )
        assert status["policy"]["carbon"]["regions"] == {"us-west-2": 420, "eu-north-1": 250}
        (held,) = await _pods(
            kube,
            namespace,
            "green-pool",
            lambda ps: ps if len(ps) == 1 and ps[0]["spec"].get("schedulingGates") else None,
            "the pod of the edited pool, held",
        )
        # eu-north-1 turns clean: the same pod is released, into that region only.
        source.write_text(json.dumps({"regions": {"us-west-2": 420, "eu-north-1": 30}}))
        placed = await _pods(
            kube,
            namespace,
            "green-pool",
            lambda ps: ps[0] if len(ps) == 1 and ps[0]["spec"].get("nodeName") else None,
            "the released pod bound",
        )
        assert placed["metadata"]["uid"] == held["metadata"]["uid"]
        assert placed["spec"]["nodeName"] == clean != dirty
        # The source turns to garbage: a condition and an Event, the last values kept.
        source.write_text("{not json")
        event = await wait_for_event(kube, namespace, reason="SourceFailed", name="green-pool")
        assert "2 region(s)" in event["message"]
        assert "last fetch failed" in event["message"]


async def test_cached_pool_reports_min_cached_replicas(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GpuCluster(kube, kubeconfig, namespace)
    primary = {"node-pool": "gpu-primary"}
    nodes = [await cluster.add_node(f"gpu{i}", "dgx-a100", labels_extra=primary) for i in range(2)]
    model = "meta-llama/Llama-3.1-8B"
    await kube.patch(
        NODES, nodes[0], {"metadata": {"annotations": {"topos.io/models": json.dumps([model])}}}
    )
    pool = _guide("cached-pool", model=model)
    # The pool exists before the coordinator starts: its first reconcile must wait for the
    # inventory's first sync instead of reporting on no nodes ("0 of 0 selected").
    await kube.create(AGENT_POOLS, pool, namespace=namespace)
    async with _coordinator(kubeconfig, cluster):
        status = await _status(
            kube,
            namespace,
            "cached-pool",
            lambda s: (s.get("policy") or {}).get("cache", {}).get("nodes") == [nodes[0]],
            "cache on the first node",
        )
        below = next(c for c in status["conditions"] if c["type"] == "ModelCached")
        assert (below["status"], below["reason"]) == ("False", "BelowMinCachedReplicas")
        assert f"1 of 2 selected node(s) hold {model} in their cache" in below["message"]
        await wait_for_event(kube, namespace, reason="BelowMinCachedReplicas", name="cached-pool")
        events = await kube.list(EVENTS, namespace=namespace)
        said = [
            e["message"]
            for e in events["items"]
            if e.get("reason") == "BelowMinCachedReplicas"
            and e["involvedObject"]["name"] == "cached-pool"
        ]
        assert said
        assert all("of 2 selected node(s)" in m for m in said), said
        # The second node's agent reports the model too: the condition turns true.
        await kube.patch(
            NODES, nodes[1], {"metadata": {"annotations": {"topos.io/models": json.dumps([model])}}}
        )
        status = await _status(
            kube,
            namespace,
            "cached-pool",
            lambda s: any(
                c["type"] == "ModelCached" and c["status"] == "True"
                for c in s.get("conditions") or ()
            ),
            "ModelCached true",
        )
        assert status["policy"]["cache"]["cachedNodes"] == 2


async def test_no_pool_is_reconciled_before_the_node_inventory_is_ready(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    await kube.create(AGENT_POOLS, _guide("cached-pool", model="m"), namespace=namespace)
    inventory_ready = asyncio.Event()
    async with controller(kubeconfig, namespace, "no-nodes", ready=[inventory_ready]) as ctl:
        # The controller has the pool and holds it back: nothing is judged on no nodes.
        await eventually(lambda: ctl.held_back > 0, what="the controller to hold the pool back")
        assert (namespace, "cached-pool") in ctl.pools.objects
        pool = await kube.get(AGENT_POOLS, "cached-pool", namespace=namespace)
        assert not pool.get("status")
        pods = await kube.list(PODS, namespace=namespace, label_selector="neuronetes.io/pool")
        assert pods["items"] == []
        inventory_ready.set()
        status = await _status(
            kube, namespace, "cached-pool", lambda s: bool(s.get("conditions")), "a status"
        )
        assert any(c["type"] == "ModelCached" for c in status["conditions"])
