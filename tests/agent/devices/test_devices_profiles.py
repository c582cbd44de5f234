"""Built-in profiles discovered through the fake NVML + fake sysfs give the machine they describe.

Each test asserts properties a scheduler relies on (link classes, NUMA placement of every GPU, MIG
inventory, NICs, host capacity), and the conformance test checks every profile written from a
real ``nvidia-smi topo -m`` output prints that output's matrix back, cell for cell.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.devices import ProfileSource, discover_profile
from agent.devices.matrix_format import format_inventory, format_topo_matrix
from agent.devices.profiles import ProfileError, list_profiles, load_profile
from agent.devices.topo_text import parse_topo
from common.model import (
    NodeTopology,
    format_cpulist,
    topology_class,
    topology_from_json,
    topology_to_json,
    worst_link,
)

REQUIRED = {"dgx1-v100", "dgx-a100", "dgx-h100", "pcie-8x", "ws-4x-nvlink", "a100-mig"}


def test_the_required_builtins_exist() -> None:
    assert set(list_profiles()) >= REQUIRED


@pytest.mark.parametrize("name", list_profiles())
def test_every_builtin_discovers_and_survives_the_wire(name: str) -> None:
    topo = discover_profile(name)
    profile = load_profile(name)
    assert len(topo.gpus) == len(profile.gpus)
    assert topo.source == f"profile:{name}"
    assert all(g.healthy for g in topo.gpus)
    assert len({g.uuid for g in topo.gpus}) == len(topo.gpus)
    assert topology_from_json(topology_to_json(topo)) == topo
    assert format_inventory(topo).startswith(f"node {topo.hostname}")


def test_dgx1_v100_is_a_hybrid_cube_mesh() -> None:
    topo = discover_profile("dgx1-v100")
    assert not topo.nvswitch
    assert topology_class(topo) == "nvlink"
    # Every V100 spends its 6 NVLinks: a mix of single and double links, SYS elsewhere.
    for i in range(8):
        cells = [topo.link(i, j) for j in range(8) if j != i]
        assert sum(c.nvlinks for c in cells) == 6
        assert {c.nvlinks for c in cells if c.is_nvlink} == {1, 2}
        assert sum(1 for c in cells if c.kind == "SYS") == 3
    assert str(topo.link(0, 1)) == "NV1"
    assert str(topo.link(0, 3)) == "NV2"
    assert str(topo.link(0, 6)) == "NV2"
    assert str(topo.link(0, 4)) == "SYS"
    assert {g.product for g in topo.gpus} == {"Tesla V100-SXM2-16GB"}
    assert [g.compute_capability for g in topo.gpus] == ["7.0"] * 8


def test_dgx_a100_nvswitch_numa_and_nics() -> None:
    topo = discover_profile("dgx-a100", hostname="gpu-17")
    assert topo.hostname == "gpu-17"
    assert topo.nvswitch
    assert topology_class(topo) == "nvswitch"
    assert all(str(topo.link(i, j)) == "NV12" for i in range(8) for j in range(8) if i != j)
    assert [g.numa_node for g in topo.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert format_cpulist(topo.gpus[0].cpu_affinity or ()) == "48-63,176-191"
    assert [n.id for n in topo.numa_nodes] == list(range(8))
    assert topo.cpu_count == 256
    assert topo.memory_mib == 1024 * 1024
    assert topo.gpus[0].pci_bus_id == "00000000:07:00.0"
    assert [n.name for n in topo.nics] == [f"mlx5_{i}" for i in range(10)]
    # Two GPUs and two NICs per PCIe switch; the storage pair mlx5_8/9 is far from every GPU.
    assert topo.nic_links[0][:2] == ("PXB", "PXB")
    assert topo.nic_links[2][2:4] == ("PXB", "PXB")
    assert all(row[8] == "SYS" and row[9] == "SYS" for row in topo.nic_links)
    assert topo.nic_nic_links[8][9] == "PIX"
    gpu = topo.gpus[0]
    assert gpu.mig_capable is True
    assert gpu.mig_enabled is False
    assert gpu.mig_instances == ()
    assert (gpu.pcie_gen_max, gpu.pcie_width_max, gpu.power_limit_w) == (4, 16, 400.0)
    assert topo.driver_version == "555.42.02"
    assert topo.cuda_version == "12.5"


def test_dgx_a100_mig_has_one_geometry_per_gpu() -> None:
    topo = discover_profile("dgx-a100-mig")
    counts = [len(g.mig_instances) for g in topo.gpus]
    assert counts == [7, 3, 2, 1, 6, 1, 3, 3]
    assert {m.profile for m in topo.gpus[4].mig_instances} == {"1c.3g.20gb"}
    assert [m.profile for m in topo.gpus[6].mig_instances] == [
        "1c.7g.40gb",
        "2c.7g.40gb",
        "3c.7g.40gb",
    ]
    assert sorted(m.profile for m in topo.gpus[7].mig_instances) == ["1g.5gb", "2g.10gb", "4g.20gb"]
    # A full GPU has nothing left to create; every compute instance has its own MIG UUID.
    assert all(c.free == 0 for c in topo.gpus[0].mig_creatable)
    uuids = [m.uuid for g in topo.gpus for m in g.mig_instances]
    assert all(u and u.startswith("MIG-") for u in uuids)
    assert len(set(uuids)) == len(uuids)


def test_dgx_h100_nv18_two_sockets() -> None:
    topo = discover_profile("dgx-h100")
    assert topo.nvswitch
    assert worst_link(topo, list(range(8))).nvlinks == 18
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.gpus[0].cpu_affinity == tuple(range(0, 96, 2))
    assert [n.memory_mib for n in topo.numa_nodes] == [515020, 516037]
    assert topo.nic_links[0][:2] == ("PIX", "PIX")
    assert topo.nic_links[4][3:5] == ("PIX", "PIX")
    assert topo.gpus[3].pci_bus_id == "00000000:5D:00.0"
    assert topo.gpus[0].memory_total_mib == 81559
    assert topo.gpus[0].pcie_gen_max == 5


def test_pcie_8x_has_pix_node_and_sys() -> None:
    topo = discover_profile("pcie-8x")
    assert not topo.nvswitch
    assert topology_class(topo) == "pcie"
    assert str(topo.link(0, 1)) == "PIX"
    assert str(topo.link(0, 2)) == "NODE"
    assert str(topo.link(0, 4)) == "SYS"
    assert [g.numa_node for g in topo.gpus] == [0] * 4 + [1] * 4
    assert topo.gpus[0].mig_capable is False
    assert topo.nic_links[0] == ("PIX", "SYS")
    assert topo.nic_links[6] == ("SYS", "NODE")


def test_workstation_nvlink_bridges_pair_gpus() -> None:
    topo = discover_profile("ws-4x-nvlink")
    assert not topo.nvswitch
    assert str(topo.link(0, 1)) == "NV4"
    assert str(topo.link(2, 3)) == "NV4"
    assert str(topo.link(1, 2)) == "NODE"


def test_a100_mig_is_partitioned() -> None:
    topo = discover_profile("a100-mig")
    gpu = topo.gpus[0]
    assert gpu.mig_enabled is True
    got = sorted(
        (m.profile, m.placement_start, m.placement_size, m.memory_mib) for m in gpu.mig_instances
    )
    assert got == [("1g.5gb", 1, 1, 4864), ("2g.10gb", 2, 2, 9984), ("3g.20gb", 4, 4, 20096)]
    free = {c.profile: c.free for c in gpu.mig_creatable}
    assert free["1g.5gb"] == 1
    assert free["3g.20gb"] == 0
    assert free["7g.40gb"] == 0


def test_grace_hopper_gpu_memory_is_a_numa_node() -> None:
    topo = discover_profile("gh200-4x")
    assert [g.memory_numa_node for g in topo.gpus] == [4, 12, 20, 28]
    assert topo.gpus[0].numa_affinity == (0, 5, 6, 7, 8, 9, 10, 11)
    assert topo.gpus[1].numa_node == 1
    assert all(str(topo.link(i, j)) == "NV6" for i in range(4) for j in range(4) if i != j)


def test_simulated_nodes_get_distinct_uuids() -> None:
    a = discover_profile("dgx-a100", hostname="node-a")
    b = discover_profile("dgx-a100", hostname="node-b")
    assert not {g.uuid for g in a.gpus} & {g.uuid for g in b.gpus}
    assert discover_profile("dgx-a100", hostname="node-a") == a  # deterministic


def test_profile_source_keeps_one_fake_between_discoveries() -> None:
    with ProfileSource("pcie-8x", hostname="n1") as source:
        first = source.discover()
        source.nvml.mark_lost(5)
        second = source.discover()
    assert first.gpus[5].healthy
    assert not second.gpus[5].healthy
    assert "lost" in (second.gpus[5].health_reason or "")
    assert second.gpus[4].healthy


def _cells(topo_text: str, part: str) -> list[object]:
    m = parse_topo(topo_text)
    return {
        "links": m.links,
        "nic_links": m.nic_links,
        "cpu_affinity": m.cpu_affinity,
        "numa_affinity": m.numa_affinity,
        "gpu_numa_id": m.gpu_numa_id,
    }[part]


@pytest.mark.parametrize("name", [n for n in list_profiles() if load_profile(n).matrix_source])
def test_builtin_prints_the_matrix_it_was_written_from(name: str, raw_dir: Path) -> None:
    profile = load_profile(name)
    assert profile.matrix_source is not None
    source_text = (raw_dir / profile.matrix_source.file).read_text()
    printed = format_topo_matrix(discover_profile(name))
    for part in profile.matrix_source.compare:
        assert _cells(printed, part) == _cells(source_text, part), part


# -- bad profiles -----------------------------------------------------------------------------


def test_unknown_profile_names_the_builtins() -> None:
    with pytest.raises(ProfileError, match=r"unknown profile 'dgx-9000'.*dgx-a100"):
        load_profile("dgx-9000")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\ngpus: [{}]\nlinks: ['NV1']\n", "X belongs on the diagonal"),
        ("name: x\ngpus: [{}, {}]\nlinks: ['X PIX', 'SYS X']\n", "not symmetric"),
        ("name: x\ngpus: [{memory_mib: -5}]\nlinks: [X]\n", "memory_mib must not be negative"),
        (
            "name: x\nlinks: [X]\ngpus: [{mig: a100-40gb, mig_enabled: true,"
            " mig_instances: [{profile: 9g.1tb}]}]\n",
            "MIG profile '9g.1tb' unknown",
        ),
        ("name: x\ngpus: [{}]\nlinks: [X]\nbogus: 1\n", "unknown field"),
        ("name: x\ngpus: [{cpu_affinity: '3-1'}]\nlinks: [X]\n", "cpu_affinity"),
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_profile_files_are_rejected_clearly(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=message):
        load_profile(path)


def test_a_profile_file_may_extend_a_builtin(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("extends: pcie-8x\nname: mine\ncpu_count: 64\n")
    topo = discover_profile(path)
    assert topo.cpu_count == 64
    assert len(topo.gpus) == 8
    assert topo.source == "profile:mine"


def test_empty_profile_is_a_node_without_gpus(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.write_text("name: cpu-only\nnuma_nodes: [{id: 0, cpus: 0-7, memory_mib: 1024}]\n")
    topo: NodeTopology = discover_profile(path)
    assert topo.gpus == ()
    assert topo.cpu_count == 8
    assert topo.memory_mib == 1024


@pytest.mark.parametrize(
    ("name", "product", "memory_mib"),
    [
        ("gb200-nvl72", "NVIDIA GB200", 189471),
        ("gb300-nvl72", "NVIDIA GB300", 284213),
    ],
)
def test_nvl72_trays_have_four_nvswitch_gpus_on_two_graces(
    name: str, product: str, memory_mib: int
) -> None:
    topo = discover_profile(name)
    assert len(topo.gpus) == 4
    assert topo.nvswitch
    assert topology_class(topo) == "nvswitch"
    assert all(str(topo.link(i, j)) == "NV18" for i in range(4) for j in range(4) if i != j)
    assert {g.product for g in topo.gpus} == {product}
    assert {g.memory_total_mib for g in topo.gpus} == {memory_mib}
    assert [g.numa_node for g in topo.gpus] == [0, 0, 1, 1]
    assert topo.cpu_count == 144
    assert len(topo.nics) == 4


@pytest.mark.parametrize(
    ("health", "words"),
    [
        ({"nvlink_errors": {40: {"crc": 1}}}, "GPU 0 health.nvlink_errors: port 40 is not 0..11"),
        ({"nvlink_errors": {1: {"crcs": 1}}}, "unknown counter 'crcs'"),
        ({"nvlink_errors": {1: {"crc": -3}}}, r"health.nvlink_errors\[1\].crc = -3: negative"),
        ({"nvlinks_down": [12]}, "health.nvlinks_down: port 12 is not 0..11"),
        ({"ecc_uncorrected": -1}, "GPU 0 health.ecc_uncorrected = -1: negative"),
    ],
)
def test_profile_health_faults_are_checked(health: dict[str, object], words: str) -> None:
    from agent.devices.profile import ProfileError, profile_from_mapping

    data = {
        "name": "bad-health",
        "gpus": [{"nvlinks": 12, "health": health}, {"nvlinks": 12}],
        "links": ["X NV12", "NV12 X"],
    }
    with pytest.raises(ProfileError, match=words):
        profile_from_mapping(data)


def test_profile_health_reaches_nvml() -> None:
    from agent.devices.profile import profile_from_mapping
    from agent.devices.source import ProfileSource

    profile = profile_from_mapping(
        {
            "name": "sick",
            "gpus": [
                {"nvlinks": 4, "health": {"nvlink_errors": {1: {"crc": 9}}, "nvlinks_down": [3]}},
                {"nvlinks": 4, "health": {"ecc_uncorrected": 2}},
            ],
            "links": ["X NV4", "NV4 X"],
        }
    )
    with ProfileSource(profile) as source:
        top = source.discover()
    first, second = top.gpus[0].health, top.gpus[1].health
    assert first is not None
    assert second is not None
    assert [(k.link, k.up, k.crc_errors) for k in first.nvlinks] == [
        (0, True, 0),
        (1, True, 9),
        (2, True, 0),
        (3, False, 0),
    ]
    assert second.ecc_uncorrected == 2
    assert top.links[0][1] == "NV3"  # the down port no longer joins the pair
