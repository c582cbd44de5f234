"""End to end on the real control plane, where the device plugin (not Topos) picks the devices:
a real ``topos coordinator`` process, a real agent process on the fake NVML (a DGX-1, whose GPU
pairs range from two NVLinks to SYS) reading a fake kubelet PodResources server that reports
other GPUs than the ones Topos assigned.

The user sees, for a 2-GPU pod given a SYS pair instead of its NVLink pair: one
``GPUAssignmentMismatch`` Warning Event naming both sets and their link classes (one, however often
the agent reports, and a new one when the node's answer changes), the count on ``/metrics``, the
mismatch and the true GPU use in ``GET /v1/nodes/{name}``, ``kubectl topos mismatches`` and
``kubectl topos explain``. A holding naming a GPU the node does not have is named as such in its
pod's Event and harms nobody else: the agent's stream stays open and the other pod's mismatch
stands.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import aiohttp

from agent.devices import discover_profile
from cli.kubectl_plugin import build_parser, run
from common.kube import EVENTS, NODES, PODS, KubeClient
from common.model import NodeTopology, worst_link
from devcluster.churn.fleet import RUN_LABEL, Coordinator
from devcluster.kube_wait import wait_for, wait_for_object
from devcluster.nodes import SimNode, register
from devcluster.pods import gpu_pod
from devcluster.processes import spawn
from devcluster.subprocess_env import subprocess_env
from tests.support.podresources import FakePodResources
from tests.support.polling import eventually

PROFILE = "dgx1-v100"
REASON = "GPUAssignmentMismatch"


async def _json(url: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _scrape_with(base: str, line: str) -> str:
    """The coordinator's /metrics once it holds ``line`` (it counts an Event after writing it)."""

    async def scrape() -> str | None:
        text = await _text(f"{base}/metrics")
        return text if line in text else None

    return await eventually(scrape, what=line, timeout_s=30)


async def _text(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return await resp.text()


async def _events(kube: KubeClient, namespace: str, pod: str) -> list[dict[str, Any]]:
    listed = await kube.list(
        EVENTS,
        namespace=namespace,
        field_selector=f"reason={REASON},involvedObject.name={pod}",
    )
    return list(listed["items"])


async def _event_saying(kube: KubeClient, namespace: str, pod: str, text: str) -> dict[str, Any]:
    return await wait_for(
        kube,
        EVENTS,
        lambda events: next((e for e in events if text in e.get("message", "")), None),
        namespace=namespace,
        field_selector=f"reason={REASON},involvedObject.name={pod}",
        what=f"a {REASON} Event about {pod} saying {text!r}",
    )


def _sys_pair(topology: NodeTopology, avoid: set[int]) -> tuple[int, int]:
    """Two GPUs joined only across the sockets, outside ``avoid``."""
    n = len(topology.gpus)
    return next(
        (i, j)
        for i in range(n)
        for j in range(i + 1, n)
        if {i, j}.isdisjoint(avoid) and str(worst_link(topology, [i, j])) == "SYS"
    )


async def _plugin(url: str, *argv: str) -> str:
    return await run(build_parser().parse_args(["--coordinator", url, *argv]))


async def test_the_node_giving_other_gpus_is_reported_once_counted_and_shown(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    run_id = namespace[-8:]
    node = f"dgx1-mm-{run_id}"
    topology = discover_profile(PROFILE, hostname=node)
    await register(kube, [SimNode(node, PROFILE, leaf="", spine="", topology=topology)])
    await kube.patch(NODES, node, {"metadata": {"labels": {RUN_LABEL: run_id}}})
    kubelet = FakePodResources()
    coordinator = Coordinator("mm", kubeconfig, namespace, run_id, tmp_path)
    async with kubelet.serving() as socket:
        coordinator.start()
        agent = None
        try:
            await coordinator.wait_serving()
            agent_argv = [sys.executable, "-m", "cli.main", "agent", "--profile", PROFILE]
            agent_argv += ["--node", node, "--kubeconfig", str(kubeconfig), "--interval", "0.3"]
            agent_argv += ["--coordinator", coordinator.url, "--pod-resources-socket", socket]
            agent_argv += ["--listen", "", "--token-file", ""]
            agent = spawn(
                agent_argv,
                log_path=tmp_path / "agent.log",
                die_with_parent=True,
                env=subprocess_env(),
            )
            url = f"{coordinator.url}/v1/nodes/{node}"
            async with asyncio.timeout(120):  # the agent process starting, its stream open
                while not await _connected(url):  # noqa: ASYNC110 (another process)
                    await asyncio.sleep(0.1)
            await _scenario(kube, namespace, node, topology, kubelet, coordinator.url)
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(timeout=10)
            coordinator.stop()


async def _connected(url: str) -> bool:
    try:
        return bool((await _json(url)).get("connected"))
    except AssertionError:  # no such node yet
        return False


async def _scenario(
    kube: KubeClient,
    namespace: str,
    node: str,
    topology: NodeTopology,
    kubelet: FakePodResources,
    base: str,
) -> None:
    index = {g.uuid: g.index for g in topology.gpus}
    await kube.create(PODS, gpu_pod("train", gpus=2), namespace=namespace)
    train = await wait_for_object(
        kube, PODS, "train", lambda p: bool(p["spec"].get("nodeName")), namespace=namespace
    )
    assigned = train["metadata"]["annotations"]["topos.io/assigned-gpus"].split(",")
    chosen = sorted(index[u] for u in assigned)
    chosen_link = str(worst_link(topology, chosen))
    assert chosen_link.startswith("NV"), chosen_link  # Topos chose an NVLink pair
    given = _sys_pair(topology, set(chosen))
    kubelet.give(namespace, "train", *(topology.gpus[i].uuid for i in given))

    wanted = (
        f"assigned GPUs {chosen[0]},{chosen[1]} ({chosen_link}) "
        f"but the node gave GPUs {given[0]},{given[1]} (SYS)"
    )
    event = await _event_saying(kube, namespace, "train", wanted)
    assert event["type"] == "Warning"
    assert event["reportingComponent"] == "topos"
    assert f"on node {node}" in event["message"]

    # the inventory records the truth: the SYS pair is held, the NVLink pair it chose is free
    doc = await _json(f"{base}/v1/nodes/{node}")
    (mismatch,) = doc["mismatches"]
    assert (mismatch["namespace"], mismatch["pod"]) == (namespace, "train")
    assert mismatch["assigned_link"] == chosen_link
    assert mismatch["given_link"] == "SYS"
    assert mismatch["link_change"] == "worse"
    assert mismatch["message"] == wanted
    use = {u["uuid"]: u.get("holder") for u in doc["gpu_use"]}
    assert [use[topology.gpus[i].uuid] for i in given] == [f"{namespace}/train"] * 2
    assert all(use[topology.gpus[i].uuid] is None for i in chosen if i not in given)

    # The Event is seen through the watch, which may be before the coordinator counts the write.
    metric = f'topos_gpu_assignment_mismatches_total{{link="worse",node="{node}"}} 1.0'
    scrape = await _scrape_with(base, metric)
    # a mismatch is also a topology violation, under Topos's and the NeuroNetes seed's names
    assert 'topos_topology_violations_total{reason="gpu-assignment-mismatch"} 1.0' in scrape
    assert "neuronetes_scheduler_topology_violations_total 1.0" in scrape

    table = await _plugin(base, "mismatches", "-n", namespace)
    header, row = table.splitlines()
    assert re.split(r"\s{3,}", header) == ["NAMESPACE", "POD", "NODE", "ASSIGNED", "GIVEN"]
    assert re.split(r"\s{3,}", row) == [
        namespace,
        "train",
        node,
        f"GPUs {chosen[0]},{chosen[1]} ({chosen_link})",
        f"GPUs {given[0]},{given[1]} (SYS)",
    ]
    explained = await _plugin(base, "explain", "pod/train", "-n", namespace)
    assert f"node_gave: {wanted}" in explained

    # The agent reports every 0.3 s and the node changes (another pod starts): still one Event.
    await kube.create(PODS, gpu_pod("odd", gpus=1), namespace=namespace)
    odd = await wait_for_object(
        kube, PODS, "odd", lambda p: bool(p["spec"].get("nodeName")), namespace=namespace
    )
    odd_index = index[odd["metadata"]["annotations"]["topos.io/assigned-gpus"]]
    lists = kubelet.lists
    await eventually(lambda: kubelet.lists >= lists + 10, timeout_s=60, what="ten agent reads")
    assert len(await _events(kube, namespace, "train")) == 1

    # Bad input: a holding naming a GPU this node does not have. Its pod's Event says so; the
    # stream stays open, the other mismatch stands, and the count goes on.
    kubelet.give(namespace, "odd", "GPU-nowhere")
    odd_event = await _event_saying(
        kube, namespace, "odd", "GPU-nowhere (not a device of this node)"
    )
    assert f"assigned GPU {odd_index} but the node gave" in odd_event["message"]
    doc = await _json(f"{base}/v1/nodes/{node}")
    assert doc["connected"] is True
    assert doc["stale"] is False
    assert sorted(m["pod"] for m in doc["mismatches"]) == ["odd", "train"]
    await _scrape_with(
        base, f'topos_gpu_assignment_mismatches_total{{link="unknown-device",node="{node}"}} 1.0'
    )

    # The node's answer changes: the pod's mismatch Event says the new set, counted twice (one
    # Event per pod and reason, as kube's event recorder keeps them: `x2` in kubectl describe).
    other = _sys_pair(topology, set(chosen) | set(given) | {odd_index})
    kubelet.give(namespace, "train", *(topology.gpus[i].uuid for i in other))
    await _event_saying(kube, namespace, "train", f"the node gave GPUs {other[0]},{other[1]} (SYS)")
    (changed,) = await _events(kube, namespace, "train")
    assert changed["count"] == 2
    await _scrape_with(
        base, f'topos_gpu_assignment_mismatches_total{{link="worse",node="{node}"}} 2.0'
    )
