"""Every NVML call the hardware may refuse degrades one field to "unknown", never the discovery.

Errors are injected into the fake NVML at each call site the reader uses, for one GPU; the test
checks that field of that GPU is ``None`` (or the documented fallback) and the other GPUs keep it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pynvml
import pytest

from agent.devices import NvmlSource, NvmlUnavailable, ProfileSource
from agent.devices.nvml_reader import DiscoveryError
from common.model import Gpu
from tests.support.nvml import real_nvml_loads

REFUSALS = [
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_UNKNOWN,
]

# (call site, the field it feeds) on dgx-a100-mig; GPU 2 gets the error, GPU 1 must not care.
FIELDS: list[tuple[str, Callable[[Gpu], Any]]] = [
    ("nvmlDeviceGetName", lambda g: g.product),
    ("nvmlDeviceGetMemoryInfo", lambda g: g.memory_total_mib),
    ("nvmlDeviceGetCudaComputeCapability", lambda g: g.compute_capability),
    ("nvmlDeviceGetPciInfo", lambda g: g.pci_bus_id),
    ("nvmlDeviceGetMaxPcieLinkGeneration", lambda g: g.pcie_gen_max),
    ("nvmlDeviceGetMaxPcieLinkWidth", lambda g: g.pcie_width_max),
    ("nvmlDeviceGetCurrPcieLinkGeneration", lambda g: g.pcie_gen_current),
    ("nvmlDeviceGetCurrPcieLinkWidth", lambda g: g.pcie_width_current),
    ("nvmlDeviceGetPowerManagementLimit", lambda g: g.power_limit_w),
    ("nvmlDeviceGetCpuAffinity", lambda g: g.cpu_affinity),
    ("nvmlDeviceGetMemoryAffinity", lambda g: g.numa_affinity),
]


@pytest.fixture
def node() -> Iterator[ProfileSource]:
    with ProfileSource("dgx-a100-mig", hostname="degrade") as source:
        yield source


@pytest.mark.parametrize("error", REFUSALS)
@pytest.mark.parametrize(("function", "field"), FIELDS, ids=[f for f, _ in FIELDS])
def test_a_refused_query_makes_one_field_unknown(
    node: ProfileSource, function: str, field: Callable[[Gpu], Any], error: int
) -> None:
    clean = node.discover()
    node.nvml.inject_error(function, error, gpu=2)
    topo = node.discover()
    assert field(clean.gpus[2]) is not None
    assert field(topo.gpus[2]) is None
    assert field(topo.gpus[1]) == field(clean.gpus[1])
    assert topo.gpus[2].healthy
    assert topo.links == clean.links


def test_numa_node_falls_back_to_sysfs(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetMemoryAffinity", pynvml.NVML_ERROR_NOT_SUPPORTED)
    topo = node.discover()
    assert [g.numa_affinity for g in topo.gpus] == [None] * 8
    assert [g.numa_node for g in topo.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]


def test_uuid_refused_gets_a_placeholder(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetUUID", pynvml.NVML_ERROR_UNKNOWN, gpu=2)
    topo = node.discover()
    assert topo.gpus[2].uuid == "unknown:degrade:gpu2"
    assert topo.gpus[1].uuid.startswith("GPU-")


def test_driver_and_cuda_versions(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlSystemGetDriverVersion", pynvml.NVML_ERROR_UNKNOWN)
    node.nvml.inject_error("nvmlSystemGetCudaDriverVersion", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    topo = node.discover()
    assert topo.driver_version is None
    assert topo.cuda_version is None
    assert len(topo.gpus) == 8


def test_mig_mode_refused_is_unknown_not_false(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetMigMode", pynvml.NVML_ERROR_NO_PERMISSION, gpu=2)
    gpu = node.discover().gpus[2]
    assert gpu.mig_capable is None
    assert gpu.mig_enabled is None
    assert gpu.mig_instances == ()


def test_mig_listing_refused(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetGpuInstances", pynvml.NVML_ERROR_NO_PERMISSION, gpu=2)
    node.nvml.inject_error(
        "nvmlDeviceGetGpuInstanceRemainingCapacity", pynvml.NVML_ERROR_UNKNOWN, gpu=1
    )
    topo = node.discover()
    assert topo.gpus[2].mig_enabled is True
    assert topo.gpus[2].mig_instances == ()
    assert len(topo.gpus[1].mig_instances) == 3  # instances still listed …
    assert topo.gpus[1].mig_creatable == ()  # … what is creatable is not


def test_mig_device_handles_refused_leave_instances_without_uuid(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetMigDeviceHandleByIndex", pynvml.NVML_ERROR_UNKNOWN, gpu=0)
    topo = node.discover()
    assert [m.uuid for m in topo.gpus[0].mig_instances] == [None] * 7
    assert all(m.uuid for m in topo.gpus[1].mig_instances)


def test_common_ancestor_refused_falls_back_to_the_pci_tree() -> None:
    with ProfileSource("pcie-8x") as source:
        clean = source.discover()
        source.nvml.inject_error(
            "nvmlDeviceGetTopologyCommonAncestor", pynvml.NVML_ERROR_NOT_SUPPORTED
        )
        assert source.discover().links == clean.links


def test_nvlink_remote_type_unknown_still_finds_the_nvswitch(node: ProfileSource) -> None:
    node.nvml.inject_error(
        "nvmlDeviceGetNvLinkRemoteDeviceType", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    )
    topo = node.discover()
    assert topo.nvswitch
    assert {c for row in topo.links for c in row} == {"X", "NV12"}


def test_nvlink_state_refused_shows_the_pcie_path(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetNvLinkState", pynvml.NVML_ERROR_UNKNOWN)
    topo = node.discover()
    assert not topo.nvswitch
    assert {c for row in topo.links for c in row} <= {"X", "NODE", "SYS"}
    assert topo.links[0][1] == "NODE"  # GPU0 and GPU1 share NUMA node 3


def test_a_lost_gpu_is_unhealthy_and_the_rest_is_read(node: ProfileSource) -> None:
    node.nvml.mark_lost(3)
    topo = node.discover()
    lost = topo.gpus[3]
    assert not lost.healthy
    assert "lost" in (lost.health_reason or "")
    assert lost.product is None
    assert all(g.healthy for i, g in enumerate(topo.gpus) if i != 3)
    assert topo.links[0][1] == "NV12"
    assert len(topo.gpus[4].mig_instances) == 6


def test_no_handle_for_a_gpu(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetHandleByIndex", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=5)
    topo = node.discover()
    assert not topo.gpus[5].healthy
    assert topo.gpus[5].uuid == "unknown:degrade:gpu5"
    assert len(topo.gpus) == 8


def test_no_gpu_count_is_a_discovery_error(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetCount", pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(DiscoveryError):
        node.discover()


def test_nvml_source_reports_a_broken_nvml_plainly(node: ProfileSource) -> None:
    node.nvml.inject_error("nvmlDeviceGetCount", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    source = NvmlSource(nvml_module=node.nvml, sysfs_root=node.sysfs_root, hostname="x")
    with pytest.raises(NvmlUnavailable, match="could not count"):
        source.discover()


def test_nvml_source_reads_through_an_injected_module(node: ProfileSource) -> None:
    source = NvmlSource(nvml_module=node.nvml, sysfs_root=node.sysfs_root, hostname="x")
    topo = source.discover()
    assert topo.source == "nvml"
    assert topo.links == node.discover().links
    assert len(topo.numa_nodes) == 8


@pytest.mark.skipif(real_nvml_loads(), reason="this machine has an NVIDIA driver")
def test_real_nvml_without_a_driver_says_so() -> None:
    with pytest.raises(NvmlUnavailable, match="NVML is not available"):
        NvmlSource().discover()
