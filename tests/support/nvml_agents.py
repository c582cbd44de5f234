"""Real ``topos agent`` processes on the real ``pynvml`` loading the C NVML library
(``devcluster/nvmlfake``): one per node, each reading a state file written from a
:class:`~agent.devices.fake_nvml.FakeNvml` of the node's profile, so a test changes a GPU's
health by changing the fake and writing it (:meth:`Machine.write`); the agent's next cycle reads
it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.devices.fake_nvml import FakeNvml
from agent.devices.fake_sysfs import build_fake_sysfs
from agent.devices.profile import load_profile
from devcluster.nvmlfake.build import ensure_library, nvml_env
from devcluster.nvmlfake.state import write_state
from devcluster.processes import spawn, stop_group
from devcluster.subprocess_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Machine:
    """One node's NVML (the C library's state file, written from the fake) and its agent."""

    node: str
    fake: FakeNvml
    state: Path
    proc: subprocess.Popen[bytes] | None = None

    def write(self) -> None:
        write_state(self.fake, self.state)


@contextlib.contextmanager
def nvml_agents(
    kubeconfig: Path, url: str, nodes: list[str], directory: Path, profile: str
) -> Iterator[dict[str, Machine]]:
    """``topos agent`` per node of ``profile`` (hostname: the node's name, as the DRA publisher
    and the simulated nodes use), real NVML path, one discovery a second."""
    ensure_library()
    machines: dict[str, Machine] = {}
    try:
        for node in nodes:
            fake = FakeNvml(load_profile(profile), hostname=node)
            m = Machine(node, fake, directory / f"{node}.nvml")
            m.write()
            sysfs = directory / f"{node}-sys"
            build_fake_sysfs(load_profile(profile), sysfs, gpu_bus_ids=fake.gpu_bus_ids())
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **nvml_env(m.state, base={})}
            argv = [sys.executable, "-m", "cli.main", "agent", "--node", node]
            argv += ["--kubeconfig", str(kubeconfig), "--coordinator", url, "--interval", "1"]
            argv += ["--sysfs-root", str(sysfs), "--listen", "", "--pod-resources-socket", ""]
            argv += ["--token-file", ""]
            m.proc = spawn(
                argv,
                log_path=directory / f"{node}-agent.log",
                die_with_parent=True,
                env=subprocess_env(env),
                cwd=REPO,
            )
            machines[node] = m
        yield machines
    finally:
        for m in machines.values():
            if m.proc is not None:
                stop_group(m.proc.pid, grace_s=5.0, reap=m.proc.poll)
