"""Where the agent's hardware snapshot comes from: real NVML, a profile, or nothing.

``DeviceSource.discover()`` blocks (NVML and sysfs are synchronous); async callers run it with
``asyncio.to_thread(source.discover)``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any, Protocol

from agent.devices.fake_nvml import FakeNvml
from agent.devices.fake_sysfs import build_fake_sysfs
from agent.devices.nvml_reader import DiscoveryError, read_topology
from agent.devices.profile import Profile, load_profile
from agent.devices.sysfs import Sysfs, psutil_numa_fallback
from common.model import NodeTopology


class NvmlUnavailable(RuntimeError):
    """No usable NVML on this machine (no driver, no library, no permission)."""


class DeviceSource(Protocol):
    def discover(self) -> NodeTopology:
        """One full, blocking discovery."""
        ...


class NvmlSource:
    """Real hardware: ``pynvml`` (or any object with its call surface) plus the host's sysfs."""

    def __init__(
        self,
        *,
        nvml_module: Any = None,
        sysfs_root: str | Path = "/",
        hostname: str | None = None,
        health_reads: bool = True,
    ) -> None:
        self._nvml = nvml_module
        self._sysfs = Sysfs(sysfs_root)
        self.hostname = hostname or socket.gethostname()
        self.health_reads = health_reads  # off: topology only (benchmarks/agent_cycle.py)

    def _module(self) -> Any:
        if self._nvml is None:
            import pynvml

            self._nvml = pynvml
        return self._nvml

    def discover(self) -> NodeTopology:
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML is not available on this machine: {exc}") from None
        except OSError as exc:  # a broken libnvidia-ml.so
            raise NvmlUnavailable(f"NVML is not available on this machine: {exc}") from None
        try:
            return read_topology(
                nvml, sysfs=self._sysfs, hostname=self.hostname, health=self.health_reads
            )
        except DiscoveryError as exc:
            raise NvmlUnavailable(str(exc)) from None
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()


class NullSource:
    """A node without GPUs (or without NVML): CPUs and NUMA only."""

    def __init__(self, *, sysfs_root: str | Path = "/", hostname: str | None = None) -> None:
        self._sysfs = Sysfs(sysfs_root)
        self.hostname = hostname or socket.gethostname()

    def discover(self) -> NodeTopology:
        nodes = self._sysfs.numa_nodes()
        cpus = self._sysfs.cpu_count()
        memory = self._sysfs.memory_mib()
        if nodes is None:
            nodes, fallback_cpus, fallback_memory = psutil_numa_fallback()
            cpus = cpus or fallback_cpus
            memory = memory or fallback_memory
        return NodeTopology(
            hostname=self.hostname,
            numa_nodes=nodes,
            cpu_count=cpus,
            memory_mib=memory,
            source="null",
        )


class ProfileSource:
    """A simulated node: the fake NVML and a fake sysfs tree, both made from one profile.

    ``nvml`` is the live fake: MIG instances created or destroyed through it, errors injected
    into it and GPUs marked lost show up in the next ``discover()``. ``close()`` removes the
    temporary sysfs tree (also a context manager).
    """

    def __init__(
        self,
        profile: Profile | str | Path,
        *,
        hostname: str | None = None,
        health_reads: bool = True,
    ) -> None:
        self.health_reads = health_reads  # off: topology only (benchmarks/agent_cycle.py)
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self.hostname = hostname or self.profile.hostname or self.profile.name
        self.nvml = FakeNvml(self.profile, hostname=hostname)
        self._dir = Path(
            tempfile.mkdtemp(prefix=f"topos-sysfs-{self.profile.name}-", dir=_scratch())
        )
        try:
            self.sysfs = build_fake_sysfs(
                self.profile, self._dir, gpu_bus_ids=self.nvml.gpu_bus_ids()
            )
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    @property
    def sysfs_root(self) -> Path:
        return self._dir

    def discover(self) -> NodeTopology:
        self.nvml.nvmlInit()
        try:
            return read_topology(
                self.nvml,
                sysfs=self.sysfs,
                hostname=self.hostname,
                source=f"profile:{self.profile.name}",
                host_fallback=False,
                health=self.health_reads,
            )
        finally:
            self.nvml.nvmlShutdown()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> ProfileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _scratch() -> str | None:
    """Memory-backed scratch space for fake sysfs trees when there is one (many small files)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def discover_profile(
    name_or_path: str | Path | Profile, *, hostname: str | None = None
) -> NodeTopology:
    """The topology a node built from this profile reports (fake NVML + fake sysfs → reader)."""
    with ProfileSource(name_or_path, hostname=hostname) as source:
        return source.discover()
