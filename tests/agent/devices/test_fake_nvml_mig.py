"""The fake NVML answers like real NVML: the same errors, and MIG state that changes on request.

MIG create/destroy goes through the same ``nvml*`` calls an operator tool would make, and the
next discovery reports the new instances, placements and what is still creatable.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from agent.devices import ProfileSource
from agent.devices.fake_nvml import FakeNvml
from agent.devices.profiles import load_profile


@pytest.fixture
def pcie() -> FakeNvml:
    nvml = FakeNvml(load_profile("pcie-8x"))
    nvml.nvmlInit()
    return nvml


@pytest.fixture
def a100() -> ProfileSource:
    source = ProfileSource("dgx-a100", hostname="mig-node")
    source.nvml.nvmlInit()
    yield source  # type: ignore[misc]
    source.close()


def test_calls_before_init_fail_like_nvml() -> None:
    nvml = FakeNvml(load_profile("pcie-8x"))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


def test_nvlink_queries_on_a_pcie_gpu_are_not_supported(pcie: FakeNvml) -> None:
    handle = pcie.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pcie.nvmlDeviceGetNvLinkState(handle, 0)


def test_nvlink_past_the_last_port_is_an_invalid_argument() -> None:
    nvml = FakeNvml(load_profile("ws-4x-nvlink"))
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetNvLinkState(handle, 3) == pynvml.NVML_FEATURE_ENABLED
    peer = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, 0).busId.decode()
    assert peer == nvml.gpu_bus_ids()[1]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkState(handle, 4)


def test_nvswitch_ports_report_a_switch() -> None:
    nvml = FakeNvml(load_profile("dgx-h100"))
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(2)
    kinds = {nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) for link in range(18)}
    assert kinds == {pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH}


def test_mig_calls_on_a_gpu_without_mig(pcie: FakeNvml) -> None:
    handle = pcie.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pcie.nvmlDeviceGetMigMode(handle)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pcie.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pcie.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pcie.nvmlDeviceGetGpuInstanceId(handle)


def test_mig_capable_but_disabled_refuses_instances(a100: ProfileSource) -> None:
    nvml = a100.nvml
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceCreateGpuInstance(handle, 9)


def _enable(nvml: FakeNvml, index: int) -> object:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    nvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
    return handle


def test_creating_and_destroying_instances_changes_the_inventory(a100: ProfileSource) -> None:
    nvml = a100.nvml
    handle = _enable(nvml, 2)
    before = a100.discover().gpus[2]
    assert before.mig_enabled is True
    assert before.mig_instances == ()
    assert {c.profile: c.free for c in before.mig_creatable}["3g.20gb"] == 2

    gi = nvml.nvmlDeviceCreateGpuInstance(handle, 9)  # 3g.20gb
    ci = nvml.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    after = a100.discover().gpus[2]
    (inst,) = after.mig_instances
    assert (inst.profile, inst.placement_start, inst.placement_size) == ("1c.3g.20gb", 4, 4)
    assert inst.uuid is not None
    assert inst.uuid.startswith("MIG-")
    free = {c.profile: c.free for c in after.mig_creatable}
    assert free["3g.20gb"] == 1
    assert free["7g.40gb"] == 0
    assert free["4g.20gb"] == 1  # slices 0-3 are still free

    with pytest.raises(pynvml.NVMLError_InUse):
        nvml.nvmlGpuInstanceDestroy(gi)  # compute instances first, as real NVML demands
    nvml.nvmlComputeInstanceDestroy(ci)
    assert a100.discover().gpus[2].mig_instances[0].ci_id is None  # GI without CI is still listed
    nvml.nvmlGpuInstanceDestroy(gi)
    assert a100.discover().gpus[2].mig_instances == ()
    assert a100.discover().gpus[3].mig_enabled is False  # the other GPUs are untouched


def test_placement_rules_of_an_a100(a100: ProfileSource) -> None:
    nvml = a100.nvml
    handle = _enable(nvml, 0)
    four = nvml.nvmlDeviceCreateGpuInstance(handle, 5)  # 4g.20gb takes slices 0-3
    assert nvml.nvmlGpuInstanceGetInfo(four).placement.start == 0
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        nvml.nvmlDeviceCreateGpuInstance(handle, 0)  # 7g.40gb no longer fits
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, 9, pynvml.c_nvmlGpuInstancePlacement_t(0, 4)
        )
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, 14, pynvml.c_nvmlGpuInstancePlacement_t(1, 2)
        )
    three = nvml.nvmlDeviceCreateGpuInstance(handle, 9)
    assert nvml.nvmlGpuInstanceGetInfo(three).placement.start == 4
    assert nvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, 19) == 0  # 7 slices used
    count = ctypes.c_uint()
    found = (nvml.c_nvmlGpuInstance_t * 2)()
    nvml.nvmlDeviceGetGpuInstances(handle, 9, found, ctypes.byref(count))
    assert count.value == 1


def test_compute_instance_splits_of_a_7g_instance(a100: ProfileSource) -> None:
    nvml = a100.nvml
    handle = _enable(nvml, 6)
    gi = nvml.nvmlDeviceCreateGpuInstance(handle, 0)
    for profile in (0, 1, 2):  # 1c, 2c, 3c: 6 of 7 slices
        nvml.nvmlGpuInstanceCreateComputeInstance(gi, profile)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        nvml.nvmlGpuInstanceCreateComputeInstance(gi, 1)
    names = [m.profile for m in a100.discover().gpus[6].mig_instances]
    assert names == ["1c.7g.40gb", "2c.7g.40gb", "3c.7g.40gb"]


def test_mig_mode_cannot_change_under_instances(a100: ProfileSource) -> None:
    nvml = a100.nvml
    handle = _enable(nvml, 1)
    nvml.nvmlDeviceCreateGpuInstance(handle, 19)
    with pytest.raises(pynvml.NVMLError_InUse):
        nvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE)


def test_injected_errors_are_real_nvml_exceptions(pcie: FakeNvml) -> None:
    pcie.inject_error("nvmlDeviceGetUUID", pynvml.NVML_ERROR_NO_PERMISSION, gpu=1, times=1)
    one = pcie.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pcie.nvmlDeviceGetUUID(one)
    assert pcie.nvmlDeviceGetUUID(one).startswith("GPU-")  # only once
    with pytest.raises(AttributeError):
        pcie.inject_error("nvmlNoSuchCall", pynvml.NVML_ERROR_UNKNOWN)
