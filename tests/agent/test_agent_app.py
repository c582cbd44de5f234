"""The agent program without a cluster: flag and environment handling (NODE_NAME, bad values →
one-line errors), the --dry-run output for a profile, the discovery cycle with NVML-event health,
and the /healthz, /readyz, /metrics endpoints."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.cycle import Agent, to_wire
from agent.endpoints import make_http_app
from agent.hardware import open_hardware
from agent.health import GpuEvent
from agent.podresources import ContainerAllocation, DeviceAllocation
from agent.settings import AgentError, AgentSettings, add_arguments, settings_from_args, stream_url
from common import labels as L
from devcluster.subprocess_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
TOPOS = [sys.executable, "-m", "cli.main"]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_node_name_comes_from_flag_then_environment() -> None:
    assert settings_from_args(_args(), environ={"NODE_NAME": "n1"}).node_name == "n1"
    assert settings_from_args(_args("--node", "n2"), environ={"NODE_NAME": "n1"}).node_name == "n2"


def test_missing_node_name_is_a_clear_error() -> None:
    with pytest.raises(AgentError, match="no node name: set NODE_NAME"):
        settings_from_args(_args(), environ={})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "0"], "--interval must be positive"),
        (["--labels-compat", "gfd,bogus"], "unknown label set"),
        (["--coordinator", "ftp://x"], "must start with http"),
        (["--listen", "nowhere"], "--listen: expected HOST:PORT"),
    ],
)
def test_bad_flags_are_clear_errors(argv: list[str], message: str) -> None:
    with pytest.raises(AgentError, match=message):
        settings_from_args(_args(*argv), environ={"NODE_NAME": "n1"})


def test_stream_url() -> None:
    assert stream_url("http://c:8080") == "ws://c:8080/v1/agents/stream"
    assert stream_url("https://c.ns.svc:443/") == "wss://c.ns.svc:443/v1/agents/stream"
    assert stream_url("ws://c/v1/agents/stream") == "ws://c/v1/agents/stream"


def test_allocations_to_wire_drop_containers_holding_nothing() -> None:
    out = to_wire(
        [
            ContainerAllocation(
                namespace="ml",
                pod="p",
                container="c",
                devices=(
                    DeviceAllocation(
                        resource_name="nvidia.com/gpu", device_ids=("GPU-1",), numa_nodes=(0,)
                    ),
                ),
                cpu_ids=(4, 5),
            ),
            ContainerAllocation(namespace="ml", pod="p", container="idle"),
        ]
    )
    assert len(out) == 1
    assert out[0].devices[0].ids == ("GPU-1",)
    assert out[0].devices[0].resource == "nvidia.com/gpu"
    assert out[0].cpus == (4, 5)


def _run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TOPOS, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env({"PATH": "/usr/bin:/bin", **(env or {})}),
        check=False,
    )


def test_cli_unknown_profile_is_one_line() -> None:
    done = _run_cli("agent", "--dry-run", "--profile", "no-such-profile")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("topos: profile no-such-profile:")


def test_cli_missing_node_name_is_one_line() -> None:
    done = _run_cli("agent", "--once", "--profile", "dgx-a100")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "topos: no node name: set NODE_NAME (the DaemonSet sets it from spec.nodeName) "
        "or pass --node"
    )


def test_cli_dry_run_prints_the_labels_of_a_profile() -> None:
    done = _run_cli("agent", "--dry-run", "--profile", "dgx-a100")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["labels"][L.GPU_TOPOLOGY] == "nvswitch"
    assert out["labels"][L.GPU_COUNT] == "8"
    assert out["labels"][L.GPU_FAMILY] == "ampere"
    assert out["labels"][L.NEURONETES_GPU_TYPE] == "A100"
    assert L.TOPOLOGY in out["annotations"]


async def test_cycle_health_events_and_http_endpoints() -> None:
    hardware = open_hardware("dgx-a100", hostname="node-a")
    try:
        settings = AgentSettings(node_name="node-a", listen=None)
        agent = Agent(settings, source=hardware.source, publisher=None)
        async with TestClient(TestServer(make_http_app(agent))) as client:
            assert (await client.get("/healthz")).status == 200
            not_ready = await client.get("/readyz")
            assert not_ready.status == 503
            assert "no discovery cycle" in (await not_ready.json())["reason"]

            first = await agent.cycle()
            assert first.labels.labels[L.GPU_HEALTHY] == "8"
            assert (await client.get("/readyz")).status == 200

            # an XID that the application caused changes nothing; a fatal one condemns the GPU
            victim = first.topology.gpus[3].uuid
            await agent.on_event(GpuEvent(uuid=victim, reason="XID 13", xid=13))
            assert (await agent.cycle()).labels.labels[L.GPU_HEALTHY] == "8"
            await agent.on_event(GpuEvent(uuid=victim, reason="XID 79", xid=79))
            after = await agent.cycle()
            assert after.labels.labels[L.GPU_HEALTHY] == "7"
            assert after.topology.gpus[3].healthy is False
            assert f"GPU3 {victim}: XID 79" in after.labels.annotations[L.GPU_HEALTH]

            metrics = await (await client.get("/metrics")).text()
            assert "topos_agent_discovery_seconds_count 3.0" in metrics
            assert "topos_agent_gpus_healthy 7.0" in metrics
            assert 'topos_agent_gpu_health{status="ok"} 8.0' in metrics  # NVML's readings: fine
            assert 'topos_agent_nvml_events_total{fatal="true"} 1.0' in metrics
            assert 'topos_agent_nvml_events_total{fatal="false"} 1.0' in metrics
    finally:
        assert hardware.close is not None
        hardware.close()


async def test_a_lost_gpu_is_reported_unhealthy() -> None:
    hardware = open_hardware("dgx-a100", hostname="node-b")
    try:
        agent = Agent(
            AgentSettings(node_name="node-b", listen=None), source=hardware.source, publisher=None
        )
        hardware.nvml.mark_lost(5)
        result = await agent.cycle()
        assert result.labels.labels[L.GPU_HEALTHY] == "7"
        assert result.topology.gpus[5].healthy is False
        assert result.labels.annotations[L.GPU_HEALTH].startswith(
            f"GPU5 {result.topology.gpus[5].uuid}: "
        )
    finally:
        assert hardware.close is not None
        hardware.close()


def test_topos_agent_entry_point_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.app import main

    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["--once", "--profile", "dgx-a100"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("topos-agent: no node name")
    assert main(["--dry-run", "--profile", "nope"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]]
    assert err[0].startswith("topos-agent: profile nope: unknown profile 'nope'")
