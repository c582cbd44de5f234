"""The agent's real NVML path: the real ``pynvml`` (nvidia-ml-py) loading a C
``libnvidia-ml.so.1`` compiled against NVIDIA's ``nvml.h`` (devcluster/nvmlfake), which answers
from the same hardware profiles as the Python fake.

Every profile discovered through ``topos discover`` on the C library must equal what the Python
fake gives; so must the agent's cycle through a fault-injection scenario (health verdicts, the
Node condition, the clique label), and NVML's XID events through the event watcher. Where they
differ, the C path is what pynvml really does.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.devices.fake_nvml import FakeNvml
from agent.devices.fake_sysfs import build_fake_sysfs
from agent.devices.profile import ProfileFabric, list_profiles, load_profile
from agent.devices.source import ProfileSource, discover_profile
from common import labels as L
from common.kube import NODES, KubeClient
from common.model import topology_to_json
from devcluster.nvmlfake.build import ensure_library, nvml_env
from devcluster.nvmlfake.state import write_state
from devcluster.subprocess_env import subprocess_env
from tests.support import health_scenario
from tests.support.kube_objects import create_node

REPO = Path(__file__).resolve().parents[3]
TOPOS = [sys.executable, "-m", "cli.main"]


@pytest.fixture(scope="module", autouse=True)
def library() -> Path:
    return ensure_library()  # compiled once per source/header/compiler (~/.cache/topos/nvmlfake)


def _machine(tmp_path: Path, fake: FakeNvml, profile: str) -> tuple[Path, Path]:
    state = tmp_path / "nvml.state"
    write_state(fake, state)
    root = tmp_path / "sys"
    build_fake_sysfs(load_profile(profile), root, gpu_bus_ids=fake.gpu_bus_ids())
    return state, root


def _discover_on_c(state: Path, sysfs: Path, hostname: str) -> dict[str, object]:
    done = subprocess.run(
        [*TOPOS, "discover", "--json", "--hostname", hostname, "--sysfs-root", str(sysfs)],
        env=nvml_env(state),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    assert "source" not in out  # "nvml" (the default): the real NVML path ran
    return out


def _as_json(fake_topology: object) -> dict[str, object]:
    out: dict[str, object] = json.loads(topology_to_json(fake_topology))  # type: ignore[arg-type]
    out.pop("source")
    return out


@pytest.mark.parametrize("profile", list_profiles())
def test_topos_discover_on_the_c_library_equals_the_python_fake(
    profile: str, tmp_path: Path
) -> None:
    fake = FakeNvml(load_profile(profile), hostname="node-a")
    state, sysfs = _machine(tmp_path, fake, profile)
    got = _discover_on_c(state, sysfs, "node-a")
    want = _as_json(discover_profile(profile, hostname="node-a"))
    assert got == want
    assert got["gpus"], "every built-in profile has GPUs"


def test_faults_read_through_pynvml_equal_the_python_fake(tmp_path: Path) -> None:
    """Health readings, a lost GPU, a down port and NotSupported calls, both paths."""
    with ProfileSource("dgx-a100", hostname="node-b") as source:
        fake = source.nvml
        fake.set_nvlink(0, 3, crc=1234, replay=56, recovery=7)
        fake.set_nvlink(1, 5, up=False)
        fake.set_health(
            2,
            ecc_corrected=10,
            ecc_uncorrected=1,
            retired_single_bit=3,
            retired_double_bit=2,
            retired_pending=True,
            remapped_corrected=4,
            remapped_uncorrected=1,
            remap_failure=True,
            clocks_event_reasons=0x48,
            fabric=ProfileFabric(cluster_uuid="5e1ab1f2-1d8a-4c1e-9b3e-2f7d0c8a9b10", clique_id=3),
        )
        fake.set_health(
            3, fabric=ProfileFabric(cluster_uuid="00" * 16, clique_id=0, state="in_progress")
        )
        fake.inject_error("nvmlDeviceGetNvLinkErrorCounter", 3, gpu=4)  # NotSupported, both
        fake.inject_error("nvmlDeviceGetFieldValues", 3, gpu=4)  # ways of asking
        fake.inject_error("nvmlDeviceGetFieldValues", 13, gpu=0)  # no field values: per link
        fake.inject_error("nvmlDeviceGetGpuFabricInfoV", 13, gpu=2)  # older driver: v1 only
        fake.mark_lost(7)
        want = _as_json(source.discover())
        state, sysfs = _machine(tmp_path, fake, "dgx-a100")
    got = _discover_on_c(state, sysfs, "node-b")
    assert got == want
    gpus = got["gpus"]
    assert isinstance(gpus, list)
    health = gpus[2]["health"]
    assert health["ecc_uncorrected"] == 1
    assert health["retired_pages_double_bit"] == 2
    assert health["remap_failure"] is True
    assert health["clocks_event_reasons"] == ["hw_slowdown", "hw_thermal"]
    # the older call has no health mask: the fabric is known, its health bits are not
    assert health["fabric"] == {
        "state": "completed",
        "cluster_uuid": "5e1ab1f2-1d8a-4c1e-9b3e-2f7d0c8a9b10",
        "clique_id": 3,
        "status": "Success",
    }
    assert gpus[3]["health"]["fabric"]["state"] == "in_progress"
    assert "clique_id" not in gpus[3]["health"]["fabric"]
    assert all("crc_errors" not in link for link in gpus[4]["health"]["nvlinks"])
    port = gpus[0]["health"]["nvlinks"][3]
    assert (port["crc_errors"], port["replay_errors"], port["recovery_errors"]) == (1234, 56, 7)
    assert gpus[1]["health"]["nvlinks"][5]["up"] is False
    assert gpus[7]["healthy"] is False
    assert "health" not in gpus[7]


def test_agent_cycles_through_faults_alike_on_both_paths(tmp_path: Path) -> None:
    profile = "dgx-h100"
    fake = FakeNvml(load_profile(profile), hostname=health_scenario.HOSTNAME)
    state, sysfs = _machine(tmp_path, fake, profile)
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.health_scenario", profile, str(state), str(sysfs)],
        env=nvml_env(state),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    on_c = json.loads(done.stdout)
    with ProfileSource(profile, hostname=health_scenario.HOSTNAME) as source:
        on_python = asyncio.run(health_scenario.run(source.nvml, source, lambda: None))
    assert on_c == json.loads(json.dumps(on_python))

    by_step = {s["step"]: s for s in on_c}
    assert by_step["steady"]["condition"] == ["True", "GPUsHealthy"]
    assert by_step["fabric registered"]["clique_label"] == f"{health_scenario.CLUSTER}.7"
    assert by_step["crc errors on GPU1 port 2"]["message"] == (
        "GPU1 degraded: NVLink 2 (to 00000000:E2:00.0) degraded: 2,341 CRC errors in 10 min"
    )
    assert by_step["counter reset on GPU1 port 2"]["condition"] == ["True", "GPUsHealthy"]
    assert by_step["GPU2 port 0 down once"]["condition"] == ["True", "GPUsHealthy"]
    assert by_step["GPU2 port 0 still down"]["message"] == (
        "GPU2 degraded: NVLink 0 down for 2 cycles"
    )
    # NVLink 0 of GPU2 no longer counts: its pairs lose one of their 18 links
    assert by_step["GPU2 port 0 still down"]["links"][2][0] == "NV17"
    unhealthy = by_step["GPU3 uncorrected ECC"]
    assert unhealthy["condition"] == ["False", "GPUUnhealthy"]
    assert unhealthy["gpus"][3]["healthy"] is False
    old = by_step["newer calls NotSupported on GPU6"]["gpus"][6]
    assert (old["status"], old["ecc_uncorrected"], old["fabric"]) == ("ok", None, None)
    assert on_c[-1]["message"].endswith("GPU7 degraded: PCIe link trained to x8 Gen5 of x16")


_WATCH = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import pynvml
    from agent.devices.fake_nvml import FakeNvml
    from agent.devices.profile import load_profile
    from agent.health import NvmlEventWatcher
    from devcluster.nvmlfake.state import write_state

    fake = FakeNvml(load_profile("dgx-a100"), hostname="node-c")
    fake.nvmlInit()
    watcher = NvmlEventWatcher(pynvml, wait_ms=50)
    watched = watcher.open()
    quiet = watcher.wait_once()
    fake.inject_event(5, xid=79)
    write_state(fake, Path(sys.argv[1]))
    event = watcher.wait_once()
    watcher.close()
    print(json.dumps({"watched": watched, "quiet": quiet is None, "uuid": event.uuid,
                      "reason": event.reason, "fatal": event.fatal,
                      "want": fake.gpu_uuids()[5]}))
    """
)


def test_xid_events_reach_the_watcher_through_pynvml(tmp_path: Path) -> None:
    fake = FakeNvml(load_profile("dgx-a100"), hostname="node-c")
    state, _ = _machine(tmp_path, fake, "dgx-a100")
    done = subprocess.run(
        [sys.executable, "-c", _WATCH, str(state)],
        env=nvml_env(state),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["watched"] == 8
    assert seen["quiet"] is True  # nothing pending: the wait timed out
    assert (seen["reason"], seen["fatal"]) == ("XID 79", True)
    assert seen["uuid"] == seen["want"]


async def test_topos_agent_on_the_c_library_sets_the_condition_and_clique_on_a_real_node(
    kube: KubeClient, kubeconfig: Path, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    """``topos agent --once`` with no profile: real NVML (pynvml on the C library), a real
    API server. GPU 3 has uncorrected ECC errors; the tray's GPUs are in one NVLink clique."""
    node = unique_name("tray")
    await create_node(kube, node)
    fake = FakeNvml(load_profile("dgx-h100"), hostname=node)
    for i in range(8):
        fake.set_health(i, fabric=ProfileFabric(cluster_uuid=health_scenario.CLUSTER, clique_id=7))
    fake.set_health(3, ecc_uncorrected=2)
    state, sysfs = _machine(tmp_path, fake, "dgx-h100")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **nvml_env(state, base={})}
    argv = ["--once", "--node", node, "--kubeconfig", str(kubeconfig), "--sysfs-root", str(sysfs)]
    done = await asyncio.to_thread(
        subprocess.run,
        [*TOPOS, "agent", *argv, "--listen", "", "--pod-resources-socket", ""],
        env=subprocess_env(env),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    obj = await kube.get(NODES, node)
    (condition,) = [c for c in obj["status"]["conditions"] if c["type"] == L.GPU_HEALTH_CONDITION]
    assert (condition["status"], condition["reason"]) == ("False", "GPUUnhealthy")
    assert condition["message"] == (
        "GPU3 unhealthy: 2 uncorrected ECC errors since the driver loaded"
    )
    labels = obj["metadata"]["labels"]
    assert labels[L.GFD_GPU_CLIQUE] == f"{health_scenario.CLUSTER}.7"
    assert labels[L.GPU_HEALTHY] == "7"
