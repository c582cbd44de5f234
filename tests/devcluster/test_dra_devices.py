"""What ``devcluster.dra`` publishes for a machine of a hardware profile, checked against the
agent's own view of the same node (same fake NVML, same hostname) and NVIDIA's driver's shapes."""

from __future__ import annotations

import pytest

from agent.devices import discover_profile
from devcluster.dra import (
    GPU_CLASS,
    MIG_CLASS,
    PCI_BUS_ID,
    PCIE_ROOT,
    architecture,
    device_classes,
    node_devices,
    resource_slice,
    semver,
)


def _string(device: dict[str, object], name: str) -> str:
    return device["attributes"][name]["string"]  # type: ignore[index,no-any-return]


@pytest.mark.parametrize("profile", ["dgx1-v100", "dgx-a100", "pcie-8x", "dgx-h100"])
def test_every_gpu_is_gpu_minor_with_the_uuid_the_agent_reports(profile: str) -> None:
    node = f"{profile}-0"
    agent = discover_profile(profile, hostname=node)
    devices = node_devices(profile, node)
    assert [d["name"] for d in devices] == [f"gpu-{g.index}" for g in agent.gpus]
    for device, gpu in zip(devices, agent.gpus, strict=True):
        assert _string(device, "type") == "gpu"
        assert _string(device, "uuid") == gpu.uuid
        assert _string(device, "productName") == gpu.product
        assert gpu.pci_bus_id is not None
        assert _string(device, PCI_BUS_ID) == gpu.pci_bus_id.lower()[4:]  # 0000:07:00.0
        assert device["capacity"] == {"memory": {"value": f"{gpu.memory_total_mib}Mi"}} or (
            device["capacity"]["memory"]["value"].endswith("Gi")  # type: ignore[index]
        )


def test_another_node_of_the_same_profile_has_other_uuids() -> None:
    first = {_string(d, "uuid") for d in node_devices("dgx-a100", "a-0")}
    second = {_string(d, "uuid") for d in node_devices("dgx-a100", "a-1")}
    assert len(first) == 8
    assert not first & second


def test_pcie_roots_follow_the_profiles_pcie_tree() -> None:
    """pcie-8x: GPU pairs behind one PCIe switch (PIX) share a root complex, pairs of one
    socket are NODE apart (other host bridges), sockets SYS: four root complexes."""
    roots = [_string(d, PCIE_ROOT) for d in node_devices("pcie-8x", "p-0")]
    assert all(root.startswith("pci0000:") for root in roots)
    assert [roots[i] == roots[i + 1] for i in range(0, 8, 2)] == [True] * 4
    assert len(set(roots)) == 4


def test_mig_gpus_are_published_as_their_mig_devices_only() -> None:
    agent = discover_profile("dgx-a100-mig", hostname="m-0")
    devices = node_devices("dgx-a100-mig", "m-0")
    names = [d["name"] for d in devices]
    assert len(names) == len(set(names))
    assert not [n for n in names if n.startswith("gpu-") and "-mig-" not in n]
    migs = {m.uuid: (g.uuid, m.profile) for g in agent.gpus for m in g.mig_instances}
    assert {
        _string(d, "uuid"): (_string(d, "parentUUID"), _string(d, "profile")) for d in devices
    } == migs
    first = next(d for d in devices if d["name"] == "gpu-0-mig-1g5gb-19-0")
    assert _string(first, "type") == "mig"
    assert first["capacity"]["memorySlice0"] == {"value": "1"}  # type: ignore[index]
    assert "memorySlice1" not in first["capacity"]  # type: ignore[operator]


def test_versions_are_semver_as_the_api_server_wants_them() -> None:
    assert semver("555.42.02") == "555.42.2"
    assert semver("8.0") == "8.0.0"
    assert semver("12") == "12.0.0"
    assert semver(None) is None
    assert semver("r535") is None
    assert architecture("9.0") == "Hopper"
    assert architecture("8.9") == "Ada Lovelace"
    assert architecture("7.5") == "Turing"
    assert architecture("7.0") == "Volta"


def test_a_profile_without_a_driver_version_leaves_the_attribute_out() -> None:
    device = node_devices("dgx1-v100", "v-0")[0]
    assert "driverVersion" not in device["attributes"]  # type: ignore[operator]
    assert device["attributes"]["cudaComputeCapability"] == {"version": "7.0.0"}  # type: ignore[index]


def test_classes_select_by_type_and_the_gpu_class_maps_nvidia_com_gpu() -> None:
    gpu, mig = device_classes()
    assert gpu["metadata"]["name"] == GPU_CLASS
    assert gpu["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "type == 'gpu'" in gpu["spec"]["selectors"][0]["cel"]["expression"]
    assert mig["metadata"]["name"] == MIG_CLASS
    assert "extendedResourceName" not in mig["spec"]


def test_the_slice_is_one_pool_named_after_its_node_owned_by_it() -> None:
    body = resource_slice("n-1", [], node_uid="u-1", generation=3)
    assert body["spec"]["pool"] == {"name": "n-1", "generation": 3, "resourceSliceCount": 1}
    assert body["spec"]["nodeName"] == "n-1"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert body["metadata"]["generateName"] == "n-1-gpu.nvidia.com-"


def test_an_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no-such-box"):
        node_devices("no-such-box", "x-0")


def test_shared_publishing_makes_whole_gpus_shareable_and_leaves_mig_alone() -> None:
    shared = node_devices("dgx-h100", "n", shared=True)
    assert len(shared) == 8
    for device in shared:
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"]["memory"] == {"value": "81559Mi"}  # no policy: ask any amount
        assert device["capacity"]["compute"]["value"] == "100"
        assert device["capacity"]["compute"]["requestPolicy"]["default"] == "10"
    assert not any("allowMultipleAllocations" in d for d in node_devices("dgx-h100", "n"))
    # MIG devices are partitions already: published as ever
    assert node_devices("a100-mig", "n", shared=True) == node_devices("a100-mig", "n")
