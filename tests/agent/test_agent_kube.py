"""The agent end to end on the real kube-apiserver: `topos agent --once` for two hardware
profiles labels two Nodes (and `kubectl describe node` shows it), a second run on a steady node
sends no PATCH (HTTP requests counted at a proxy), MIG layout changes in the fake NVML show up
in the labels with stale MIG keys removed, a missing Node is a one-line error, and the
long-running agent serves /readyz and /metrics, logs JSON lines and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp

from agent.app import serve
from agent.cycle import Agent
from agent.devices import ProfileSource
from agent.devices.profiles import profile_from_mapping
from agent.hardware import open_hardware
from agent.kube import KubeNodeApi
from agent.publish import NodePublisher
from agent.settings import AgentSettings
from common import labels as L
from common.kube import NODES, KubeClient
from devcluster.kube_wait import wait_for_object
from devcluster.processes import free_port
from devcluster.subprocess_env import subprocess_env
from tests.support.fake_profiles import TWO_L40S
from tests.support.kube_objects import create_node
from tests.support.kube_proxy import counting_proxy
from tests.support.polling import eventually

REPO = Path(__file__).resolve().parents[2]
TOPOS = [sys.executable, "-m", "cli.main"]

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


async def _make_node(kube: KubeClient, name: str) -> None:
    await create_node(kube, name, labels={L.LEAF: "l1"})


async def _agent(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *TOPOS,
        "agent",
        *argv,
        cwd=REPO,
        env=subprocess_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_once_two_profiles_label_two_nodes(
    kube: KubeClient, kubeconfig: Path, kubectl: Kubectl, unique_name: Callable[[str], str]
) -> None:
    dgx, pcie = unique_name("dgx"), unique_name("pcie")
    await _make_node(kube, dgx)
    await _make_node(kube, pcie)
    for node, profile in ((dgx, "dgx-a100"), (pcie, "pcie-8x")):
        rc, out, err = await _agent(
            "--once", "--profile", profile, "--kubeconfig", str(kubeconfig),
            env={"NODE_NAME": node},
        )  # fmt: skip
        assert rc == 0, err
        assert out.startswith(f"node {node}: ")
        assert "patched" in out

    dgx_meta = (await kube.get(NODES, dgx))["metadata"]
    pcie_meta = (await kube.get(NODES, pcie))["metadata"]
    assert dgx_meta["labels"][L.GPU_TOPOLOGY] == "nvswitch"
    assert dgx_meta["labels"][L.GPU_COUNT] == "8"
    assert dgx_meta["labels"][L.GPU_FAMILY] == "ampere"
    assert dgx_meta["labels"][L.GFD_GPU_PRODUCT].startswith("NVIDIA-A100")
    assert pcie_meta["labels"][L.GPU_TOPOLOGY] == "pcie"
    assert pcie_meta["labels"][L.GPU_COUNT] == "8"
    assert dgx_meta["labels"][L.LEAF] == "l1"  # not ours: untouched
    # every label value the API server stored is one our grammar calls legal, and the big
    # annotations made it through
    assert json.loads(dgx_meta["annotations"][L.TOPOLOGY])["hostname"] == dgx
    assert dgx_meta["annotations"][L.SUMMARY].startswith("8x NVIDIA A100")

    described = kubectl("describe", "node", dgx)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert f"{L.GPU_TOPOLOGY}=nvswitch" in text
    assert f"{L.GPU_COUNT}=8" in text
    assert f"{L.SUMMARY}: 8x NVIDIA A100" in text
    assert "numa.kubenexus.io/node-count=" in text
    shown = kubectl("get", "nodes", pcie, "-L", "topos.io/gpu.topology", "--no-headers")
    assert "pcie" in shown.stdout.split()


async def test_steady_node_second_run_sends_no_patch(
    kube: KubeClient, kubeconfig: Path, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    node = unique_name("steady")
    await _make_node(kube, node)
    async with counting_proxy(kubeconfig) as proxy:
        config = str(proxy.write_kubeconfig(tmp_path / "proxy.kubeconfig"))
        first = await _agent(
            "--once", "--profile", "dgx-a100", "--node", node, "--kubeconfig", config
        )
        second = await _agent(
            "--once", "--profile", "dgx-a100", "--node", node, "--kubeconfig", config
        )
    assert first[0] == 0, first[2]
    assert second[0] == 0, second[2]
    assert "patched" in first[1]
    assert second[1].strip().endswith("unchanged")
    path = f"/api/v1/nodes/{node}"
    assert proxy.count("PATCH", path) == 1  # labels and annotations, first run only
    assert proxy.count("PATCH", path + "/status") == 1  # the ToposGPUHealthy condition, once
    assert proxy.count("GET", path) == 2
    assert [m for m, _ in proxy.requests].count("PATCH") == 2
    status = (await kube.get(NODES, node))["status"]
    (condition,) = [c for c in status["conditions"] if c["type"] == L.GPU_HEALTH_CONDITION]
    assert condition["status"] == "True"
    assert condition["reason"] == "GPUsHealthy"
    assert condition["message"] == "8 of 8 GPUs report health; all healthy"


async def test_missing_node_is_one_line(kubeconfig: Path) -> None:
    rc, _, err = await _agent(
        "--once", "--profile", "dgx-a100", "--node", "ghost-node", "--kubeconfig", str(kubeconfig)
    )
    assert rc == 1
    assert err.strip().splitlines() == [
        "topos: node 'ghost-node' not found in the API server "
        "(is NODE_NAME / --node the Node's name?)"
    ]


async def test_mig_layout_change_is_followed(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("mig")
    await _make_node(kube, node)
    hardware = open_hardware("a100-mig", hostname=node)
    try:
        agent = Agent(
            AgentSettings(node_name=node, listen=None),
            source=hardware.source,
            publisher=NodePublisher(KubeNodeApi(kube), node),
        )
        before = await agent.cycle()
        meta = (await kube.get(NODES, node))["metadata"]
        assert meta["labels"][L.MIG_ENABLED] == "true"
        layout_before = meta["annotations"][L.MIG_LAYOUT]
        mig_keys_before = {k for k in meta["labels"] if k.startswith("nvidia.com/mig-")}
        assert mig_keys_before

        nvml = hardware.nvml
        destroyed = _destroy_all_instances(nvml)
        assert destroyed > 0
        after_destroy = await agent.cycle()
        assert after_destroy.publish is not None
        assert after_destroy.publish.patched
        meta = (await kube.get(NODES, node))["metadata"]
        assert not any(k.startswith("nvidia.com/mig-") for k in meta["labels"])
        assert L.MIG_LAYOUT not in meta["annotations"]

        _create_one(nvml, gpu=0, profile_const="NVML_GPU_INSTANCE_PROFILE_7_SLICE")
        recreated = await agent.cycle()
        meta = (await kube.get(NODES, node))["metadata"]
        seven = [
            k for k in meta["labels"] if k.startswith("nvidia.com/mig-7g.") and k.endswith(".count")
        ]
        assert len(seven) == 1
        assert meta["labels"][seven[0]] == "1"
        assert meta["annotations"][L.MIG_LAYOUT].startswith("7g.")
        assert meta["annotations"][L.MIG_LAYOUT] != layout_before
        assert before.topology.gpus[0].mig_instances != recreated.topology.gpus[0].mig_instances
    finally:
        assert hardware.close is not None
        hardware.close()


def _destroy_all_instances(nvml) -> int:  # type: ignore[no-untyped-def]
    """Destroy every compute and GPU instance on every GPU, the way nvidia-smi mig -dci/-dgi do."""
    nvml.nvmlInit()
    destroyed = 0
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                current, _ = nvml.nvmlDeviceGetMigMode(handle)
            except nvml.NVMLError:
                continue
            if not current:
                continue
            for name in dir(nvml):
                if not name.startswith("NVML_GPU_INSTANCE_PROFILE_") or name.endswith("_COUNT"):
                    continue
                try:
                    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, getattr(nvml, name))
                except nvml.NVMLError:
                    continue
                array = (nvml.c_nvmlGpuInstance_t * 8)()
                count = _count()
                nvml.nvmlDeviceGetGpuInstances(handle, info.id, array, count)
                for k in range(count.value):
                    gi = array[k]
                    cis = (nvml.c_nvmlComputeInstance_t * 8)()
                    for ci_name in dir(nvml):
                        if not ci_name.startswith(
                            "NVML_COMPUTE_INSTANCE_PROFILE_"
                        ) or ci_name.endswith("_COUNT"):
                            continue
                        try:
                            ci_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                                gi,
                                getattr(nvml, ci_name),
                                nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                            )
                        except nvml.NVMLError:
                            continue
                        ci_count = _count()
                        nvml.nvmlGpuInstanceGetComputeInstances(gi, ci_info.id, cis, ci_count)
                        for c in range(ci_count.value):
                            nvml.nvmlComputeInstanceDestroy(cis[c])
                    nvml.nvmlGpuInstanceDestroy(gi)
                    destroyed += 1
    finally:
        nvml.nvmlShutdown()
    return destroyed


def _count():  # type: ignore[no-untyped-def]
    import ctypes

    return ctypes.c_uint(0)


def _create_one(nvml, *, gpu: int, profile_const: str) -> None:  # type: ignore[no-untyped-def]
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
        info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, getattr(nvml, profile_const))
        gi = nvml.nvmlDeviceCreateGpuInstance(handle, info.id)
        ci_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi,
            nvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
            nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    finally:
        nvml.nvmlShutdown()


async def test_long_running_agent_serves_health_and_stops_on_sigterm(
    kube: KubeClient, kubeconfig: Path, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("daemon")
    await _make_node(kube, node)
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *TOPOS, "agent", "--profile", "pcie-8x", "--kubeconfig", str(kubeconfig),
        "--listen", f"127.0.0.1:{port}", "--interval", "0.5", "--pod-resources-socket", "",
        cwd=REPO,
        env=subprocess_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODE_NAME": node}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            ready = False
            for _ in range(600):  # readiness, not timing: poll until ready (bounded)
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as reply:
                        if reply.status == 200:
                            ready = True
                            break
                except aiohttp.ClientError:
                    pass
                if process.returncode is not None:
                    break
                await asyncio.sleep(0.1)
            assert ready, "agent never became ready"
            async with http.get(f"http://127.0.0.1:{port}/healthz") as reply:
                assert reply.status == 200
            async with http.get(f"http://127.0.0.1:{port}/metrics") as reply:
                metrics = await reply.text()
        assert 'topos_agent_publish_total{result="patched"} 1.0' in metrics
        assert "topos_agent_discovery_seconds_bucket" in metrics
        meta = (await kube.get(NODES, node))["metadata"]
        assert meta["labels"][L.GPU_TOPOLOGY] == "pcie"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    lines = [line for line in err.decode().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every log line is one JSON object
    messages = [r["msg"] for r in records]
    assert "agent started" in messages
    assert messages[-1] == "agent stopped"
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)


async def test_xid_event_triggers_a_cycle_and_marks_the_gpu_unhealthy(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("xid")
    await _make_node(kube, node)
    source = ProfileSource(profile_from_mapping(TWO_L40S), hostname=node)
    # an interval far beyond the test: any cycle after the first is the event's doing
    settings = AgentSettings(node_name=node, listen=None, interval_s=3600)
    agent = Agent(settings, source=source, publisher=NodePublisher(KubeNodeApi(kube), node))
    task = asyncio.create_task(serve(agent, nvml=source.nvml))
    try:
        labels = await _wait_for_label(kube, node, L.GPU_HEALTHY, "2")
        assert labels[L.GPU_TOPOLOGY] == "pcie"
        delivered = 0
        for _ in range(3000):  # until the watcher (in its thread) has registered the GPUs
            delivered = source.nvml.inject_event(1, xid=79)
            if delivered:
                break
            await asyncio.sleep(0.01)
        assert delivered == 1
        await _wait_for_label(kube, node, L.GPU_HEALTHY, "1")
        meta = (await kube.get(NODES, node))["metadata"]
        uuid = source.nvml.gpu_uuids()[1]
        assert meta["annotations"][L.GPU_HEALTH] == f"GPU1 {uuid}: XID 79"
        assert "1/2 healthy" in meta["annotations"][L.SUMMARY]
    finally:
        agent.stop()
        await asyncio.wait_for(task, 60)
        source.close()


async def _wait_for_label(kube: KubeClient, node: str, key: str, value: str) -> dict[str, str]:
    """The Node's labels once ``key`` has ``value`` (watched, bounded)."""
    obj = await wait_for_object(
        kube,
        NODES,
        node,
        lambda n: (n["metadata"].get("labels") or {}).get(key) == value,
        what=f"label {key}={value} on node {node}",
    )
    labels: dict[str, str] = obj["metadata"]["labels"]
    return labels


async def test_agent_streams_to_a_coordinator_while_publishing(
    kube: KubeClient, kubeconfig: Path, unique_name: Callable[[str], str]
) -> None:
    from coordinator.app.config.load import parse_config
    from coordinator.app.kube_backend import KubeBackend
    from coordinator.app.main import running, wire
    from devcluster.nodes import SimNode, plan_nodes, register

    (planned,) = plan_nodes([("pcie-8x", 1)])
    node = SimNode(
        name=unique_name("streamed"),
        profile=planned.profile,
        leaf=planned.leaf,
        spine=planned.spine,
        topology=planned.topology,
    )
    await register(kube, [node])
    config = parse_config(
        {
            "coordinator": {"sweepIntervalSeconds": 3600},
            "auth": {"enabled": False},
            # not about scheduling: no scheduler binding other tests' pods on the shared plane
            "scheduler": {"enabled": False},
        }
    )
    async with running(wire(config, KubeBackend(str(kubeconfig)))) as url:
        hardware = open_hardware("pcie-8x", hostname=node.name)
        settings = AgentSettings(
            node_name=node.name, listen=None, interval_s=3600, coordinator=url, token_file=None
        )
        agent = Agent(
            settings,
            source=hardware.source,
            publisher=NodePublisher(KubeNodeApi(kube), node.name),
        )
        task = asyncio.create_task(serve(agent, nvml=hardware.nvml))
        try:
            async with aiohttp.ClientSession() as http:

                async def connected() -> dict[str, object] | None:
                    async with http.get(f"{url}/v1/nodes/{node.name}") as reply:
                        seen: dict[str, object] = await reply.json() if reply.ok else {}
                    return seen if seen.get("connected") is True else None

                seen = await eventually(connected, what="the coordinator to have the hello")
            topology = seen["topology"]
            assert isinstance(topology, dict)
            assert topology["hostname"] == node.name
            # the stream client reports CONNECTED on its next send-loop turn (≤ one heartbeat)
            registry = agent.metrics.registry
            await eventually(
                lambda: (
                    registry.get_sample_value("topos_agent_stream_state", {"state": "connected"})
                    == 1
                ),
                what="the stream state metric to say connected",
            )
            labels = await _wait_for_label(kube, node.name, L.GPU_TOPOLOGY, "pcie")
            assert labels[L.LEAF] == node.leaf  # devcluster's tier label survives publishing
        finally:
            agent.stop()
            await asyncio.wait_for(task, 60)
            assert hardware.close is not None
            hardware.close()
    assert agent.stream is not None
    assert agent.stream.state.value == "closed"


async def test_readiness_follows_the_last_cycle(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("ready")
    await _make_node(kube, node)
    hardware = open_hardware("pcie-8x", hostname=node)
    settings = AgentSettings(node_name=node, listen=None, interval_s=3600)
    agent = Agent(
        settings, source=hardware.source, publisher=NodePublisher(KubeNodeApi(kube), node)
    )
    task = asyncio.create_task(agent.run_cycles())
    try:
        await _wait_for_label(kube, node, L.GPU_TOPOLOGY, "pcie")
        await kube.delete(NODES, node)

        def woken_and_unready() -> bool:  # the deletion is seen by the next cycle we trigger
            agent.wake()
            return not agent.ready

        await eventually(woken_and_unready, what="the agent to turn unready")
        assert agent.last_error is not None
        assert f"node {node!r} not found" in agent.last_error
        assert agent.metrics.registry.get_sample_value("topos_agent_publish_errors_total") >= 1
    finally:
        agent.stop()
        await asyncio.wait_for(task, 60)
        assert hardware.close is not None
        hardware.close()
