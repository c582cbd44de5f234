"""One fault-injection scenario run through the agent's real cycle, on either NVML path.

``run(fake, source, write)`` drives ``fake`` (the profile-driven ``FakeNvml``) through a fixed
list of faults, one agent cycle after each, with a driven clock (one minute per step), and
returns what a user would see per cycle: each GPU's health verdict and reasons, the link
states, and the ``ToposGPUHealthy`` condition. ``source`` is what the agent discovers through:
the Python fake itself (``ProfileSource``), or the real ``pynvml`` loading the C library
(``NvmlSource``), in which case ``write`` rewrites the library's state file after each fault.

``python -m tests.support.health_scenario PROFILE STATE SYSFS`` runs it on the C library (the
environment must make ``pynvml`` load it: ``devcluster.nvmlfake.build.nvml_env``) and prints
the result as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.cycle import Agent, health_condition
from agent.devices.fake_nvml import FakeNvml
from agent.devices.profile import ProfileFabric, load_profile
from agent.devices.source import DeviceSource
from agent.settings import AgentSettings

HOSTNAME = "scenario-node"
CLUSTER = "5e1ab1f2-1d8a-4c1e-9b3e-2f7d0c8a9b10"

_NEWER_CALLS = (
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetGpuFabricInfo",
)


def _nothing(fake: FakeNvml) -> None:
    pass


def _register_fabric(fake: FakeNvml) -> None:
    for i in range(len(fake.gpu_uuids())):
        fake.set_health(i, fabric=ProfileFabric(cluster_uuid=CLUSTER, clique_id=7))


def _degrade_fabric(fake: FakeNvml) -> None:
    fake.set_health(5, fabric=ProfileFabric(cluster_uuid=CLUSTER, clique_id=7, health_mask=0x1))


def _old_driver(fake: FakeNvml) -> None:
    for function in _NEWER_CALLS:
        fake.inject_error(function, 3, gpu=6)  # NVML_ERROR_NOT_SUPPORTED


# (what happens, the change to the fake); one agent cycle follows each
STEPS: list[tuple[str, Callable[[FakeNvml], None]]] = [
    ("steady", _nothing),
    ("fabric registered", _register_fabric),
    ("crc errors on GPU1 port 2", lambda f: f.set_nvlink(1, 2, crc=2341)),
    ("crc errors rise again", lambda f: f.set_nvlink(1, 2, crc=2400)),
    ("counter reset on GPU1 port 2", lambda f: f.set_nvlink(1, 2, crc=5)),
    ("GPU2 port 0 down once", lambda f: f.set_nvlink(2, 0, up=False)),
    ("GPU2 port 0 still down", _nothing),
    ("GPU3 uncorrected ECC", lambda f: f.set_health(3, ecc_uncorrected=2)),
    (
        "GPU4 row remap pending, hw slowdown",
        lambda f: f.set_health(4, remap_pending=True, clocks_event_reasons=0x8),
    ),
    ("GPU5 fabric degraded", _degrade_fabric),
    ("newer calls NotSupported on GPU6", _old_driver),
    ("GPU7 PCIe trained down to x8", lambda f: f.set_pcie(7, width=8)),
]


def _view(result: Any) -> dict[str, Any]:
    gpus = []
    for gpu in result.topology.gpus:
        h = gpu.health
        gpus.append(
            {
                "index": gpu.index,
                "healthy": gpu.healthy,
                "status": None if h is None else h.status,
                "reasons": [] if h is None else list(h.reasons),
                "ecc_uncorrected": None if h is None else h.ecc_uncorrected,
                "links_down": [] if h is None else [k.link for k in h.nvlinks if not k.up],
                "fabric": None if h is None or h.fabric is None else h.fabric.clique,
            }
        )
    condition = health_condition(result.topology)
    return {
        "gpus": gpus,
        "links": [list(row) for row in result.topology.links],
        "clique_label": result.labels.labels.get("nvidia.com/gpu.clique"),
        "condition": None if condition is None else [condition.status, condition.reason],
        "message": None if condition is None else condition.message,
    }


async def run(fake: FakeNvml, source: DeviceSource, write: Callable[[], None]) -> list[Any]:
    now = [0.0]
    agent = Agent(
        AgentSettings(node_name=HOSTNAME, listen=None),
        source=source,
        publisher=None,
        clock=lambda: now[0],
    )
    out = []
    for what, change in STEPS:
        change(fake)
        write()
        now[0] += 60.0
        out.append({"step": what, **_view(await agent.cycle())})
    return out


def main(argv: list[str]) -> int:
    from agent.devices.source import NvmlSource
    from devcluster.nvmlfake.state import write_state

    profile, state, sysfs = argv
    fake = FakeNvml(load_profile(profile), hostname=HOSTNAME)
    source = NvmlSource(hostname=HOSTNAME, sysfs_root=sysfs)
    result = asyncio.run(run(fake, source, lambda: write_state(fake, Path(state))))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
