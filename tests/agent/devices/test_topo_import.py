"""Importing real ``nvidia-smi`` output: every quirk of real matrices is read, garbage is rejected
with the line named, and import → profile → fake NVML → discovery → print gives the input back.

The fixtures here are written for these tests (tabs, spaces, ANSI codes, empty affinity cells,
truncation); the conformance test at the end runs over every real file in ../shared/hw/raw.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.devices import discover_profile
from agent.devices.importer import (
    ImportError_,
    build_profile,
    import_files,
    parse_mig_tables,
    parse_query,
)
from agent.devices.matrix_format import format_topo_matrix
from agent.devices.topo_text import TopoParseError, parse_topo

RAW_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "hw" / "raw"


def raw_topo_files() -> list[Path]:
    return sorted(RAW_DIR.glob("topo-*.txt")) if RAW_DIR.is_dir() else []


T = "\t"
TABS_WITH_LEGENDS = (
    f"{T}\x1b[4mGPU0{T}GPU1{T}GPU2{T}GPU3{T}NIC0{T}NIC1"
    f"{T}CPU Affinity{T}NUMA Affinity{T}GPU NUMA ID\x1b[0m\n"
    f"GPU0{T} X {T}NV2{T}PIX{T}SYS{T}PIX{T}SYS{T}0-7,16-23{T}0{T}{T}N/A\n"
    f"GPU1{T}NV2{T} X {T}PIX{T}SYS{T}PIX{T}SYS{T}0-7,16-23{T}0{T}{T}N/A\n"
    f"GPU2{T}PIX{T}PIX{T} X {T}SYS{T}PIX{T}SYS{T}0-7,16-23{T}0{T}{T}N/A\n"
    f"GPU3{T}SYS{T}SYS{T}SYS{T} X {T}SYS{T}PXB{T}{T}1{T}{T}N/A\n"
    f"NIC0{T}PIX{T}PIX{T}PIX{T}SYS{T} X {T}SYS\n"
    f"NIC1{T}SYS{T}SYS{T}SYS{T}PXB{T}SYS{T} X \n"
    "\nLegend:\n\n  X    = Self\n  PIX  = one bridge\n  NV#  = NVLinks\n"
    "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n\n"
)

# Tabs expanded to 8-column stops, empty CPU Affinity on the second pair, CR line ends,
# trailing spaces, and an old-driver row with an extra empty field.
SPACES = (
    "        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity   GPU NUMA ID\r\n"
    "GPU0     X      NV12    NODE    NODE    0-15,56-71      0               N/A   \r\n"
    "GPU1    NV12     X      NODE    NODE    0-15,56-71      0               N/A\r\n"
    "GPU2    NODE    NODE     X      NV12            1               N/A\r\n"
    "GPU3    NODE    NODE    NV12     X              1               N/A\r\n"
)
OLD_DRIVER = (
    f"{T}GPU0{T}GPU1{T}CPU Affinity{T}NUMA Affinity\n"
    f"GPU0{T} X {T}NV1{T}0-31{T}{T}N/A\n"
    f"GPU1{T}NV1{T} X {T}0-31{T}{T}N/A\n"
)
TRUNCATED = (
    "        GPU0    GPU1    GPU2    GPU3    mlx5_0  CPU Affinity\n"
    "GPU0     X      NV6     NV6     NV6     PIX     0-23\n"
    "GPU1    NV6      X      NV6     NV6     PXB     0-23\n"
)


def test_tabs_ansi_and_legends() -> None:
    m = parse_topo(TABS_WITH_LEGENDS)
    assert m.gpu_count == 4
    assert m.nics == ["mlx5_0", "mlx5_1"]
    assert m.links[0] == ["X", "NV2", "PIX", "SYS"]
    assert m.nic_links[3] == ["SYS", "PXB"]
    assert m.cpu_affinity == ["0-7,16-23"] * 3 + [""]
    assert m.numa_affinity == ["0", "0", "0", "1"]
    assert m.gpu_numa_id == [None] * 4


def test_expanded_tabs_with_empty_cells() -> None:
    m = parse_topo(SPACES)
    assert m.cpu_affinity == ["0-15,56-71", "0-15,56-71", "", ""]
    assert m.numa_affinity == ["0", "0", "1", "1"]
    assert m.links[2] == ["NODE", "NODE", "X", "NV12"]


def test_old_driver_extra_empty_field() -> None:
    m = parse_topo(OLD_DRIVER)
    assert m.cpu_affinity == ["0-31", "0-31"]
    assert m.numa_affinity == [None, None]


def test_truncated_rows_keep_the_whole_gpus() -> None:
    m = parse_topo(TRUNCATED)
    assert m.gpu_count == 2
    assert m.header_gpu_count == 4
    assert m.links == [["X", "NV6"], ["NV6", "X"]]
    assert m.nic_links == [["PIX"], ["PXB"]]
    assert any("GPU2…GPU3 missing" in n for n in m.notes)


@pytest.mark.parametrize(
    "text",
    [TABS_WITH_LEGENDS, SPACES, OLD_DRIVER, TRUNCATED],
    ids=["tabs", "spaces", "old-driver", "truncated"],
)
def test_fixture_round_trips_through_the_fake(text: str) -> None:
    source = parse_topo(text)
    profile = build_profile(source, name="fixture")
    printed = parse_topo(format_topo_matrix(discover_profile(profile)))
    assert printed.links == source.links
    assert printed.nic_links == source.nic_links
    assert printed.cpu_affinity == source.cpu_affinity
    assert printed.numa_affinity == source.numa_affinity
    assert printed.gpu_numa_id == source.gpu_numa_id


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", 1, "empty input"),
        ("hello world\n", 1, "expected the header row"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV2\t X \nGPU7\tSYS\tSYS\n", 4, "not a column"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNVX\t X \n", 3, "'NVX' is not X, NV<n>"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tSYS\t X \n", 3, "not symmetric"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPIX\t X \n", 2, "has 1 cells"),
        ("\tGPU0\tGPU1\nGPU0\tPIX\t X \nGPU1\tPIX\t X \n", 2, "must have X in its own column"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n\nrm -rf /\n", 5, "unexpected text"),
        (
            "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\tabc\nGPU1\tPIX\t X \t0-3\n",
            2,
            "CPU Affinity",
        ),
        ("\tGPU0\tGPU1\tWAT!\nGPU0\t X \tPIX\n", 1, "'WAT!' is not a device"),
        ("\tGPU0\tGPU1\n\n", 2, "no GPU rows"),
        ("\tGPU0\tGPU1\nGPU1\tPIX\t X \n", 2, "without the rows before it"),
    ],
)
def test_garbage_is_rejected_naming_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(TopoParseError, match=message) as info:
        parse_topo(text)
    assert info.value.line == line
    assert str(info.value).startswith(f"line {line}:")


QUERY_TEXT = """==============NVSMI LOG==============

Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 2
GPU 00000000:1A:00.0
    Product Name                          : NVIDIA L40S
    MIG Mode
        Current                           : N/A
    GPU UUID                              : GPU-11111111-2222-3333-4444-555555555555
    PCI
        Bus Id                            : 00000000:1A:00.0
        GPU Link Info
            PCIe Generation
                Max                       : 4
                Current                   : 1
            Link Width
                Max                       : 16x
                Current                   : 16x
    FB Memory Usage
        Total                             : 46068 MiB
    GPU Power Readings
        Current Power Limit               : 350.00 W

GPU 00000000:3D:00.0
    Product Name                          : NVIDIA L40S
    GPU UUID                              : GPU-66666666-2222-3333-4444-555555555555
    PCI
        Bus Id                            : 00000000:3D:00.0
    FB Memory Usage
        Total                             : 46068 MiB
"""

QUERY_XML = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>565.57.01</driver_version>
  <cuda_version>12.7</cuda_version>
  <gpu id="00000000:18:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>GPU-aaaaaaaa-2222-3333-4444-555555555555</uuid>
    <mig_mode><current_mig>Enabled</current_mig></mig_mode>
    <pci><pci_bus_id>00000000:18:00.0</pci_bus_id>
      <pci_gpu_link_info><pcie_gen><max_link_gen>5</max_link_gen></pcie_gen></pci_gpu_link_info>
    </pci>
    <fb_memory_usage><total>81559 MiB</total></fb_memory_usage>
  </gpu>
</nvidia_smi_log>
"""


def test_query_text_fills_products_and_pcie() -> None:
    q = parse_query(QUERY_TEXT)
    assert (q.driver_version, q.cuda_version) == ("550.54.15", "12.4")
    assert [g.bus_id for g in q.gpus] == ["00000000:1A:00.0", "00000000:3D:00.0"]
    first = q.gpus[0]
    assert (first.pcie_gen_max, first.pcie_gen_current, first.pcie_width_max) == (4, 1, 16)
    assert (first.memory_mib, first.power_limit_w) == (46068, 350.0)
    matrix = parse_topo(OLD_DRIVER)
    topo = discover_profile(build_profile(matrix, name="q", query=q))
    assert topo.gpus[1].uuid == "GPU-66666666-2222-3333-4444-555555555555"
    assert topo.gpus[0].compute_capability == "8.9"
    assert topo.gpus[0].pci_bus_id == "00000000:1A:00.0"


def test_query_xml() -> None:
    q = parse_query(QUERY_XML)
    assert q.driver_version == "565.57.01"
    assert q.gpus[0].product == "NVIDIA H100 80GB HBM3"
    assert q.gpus[0].mig_enabled is True
    assert q.gpus[0].pcie_gen_max == 5


def test_query_garbage() -> None:
    with pytest.raises(ImportError_, match="line 1: not `nvidia-smi -q`"):
        parse_query("just some words\n")
    with pytest.raises(ImportError_, match=r"line \d+: not valid XML"):
        parse_query("<nvidia_smi_log><gpu>\n</nvidia_smi_log>")


LGIP = """+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.40gb        9     2/2        39.50      No     60     3     0   |
|                                                             3     3     0   |
+-----------------------------------------------------------------------------+
"""
LGI = """+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   1  MIG 3g.40gb          9        1          0:4     |
+-------------------------------------------------------+
|   1  MIG 2g.20gb         14        2          4:2     |
+-------------------------------------------------------+
"""


def test_mig_tables_make_mig_gpus(tmp_path: Path) -> None:
    tables = parse_mig_tables(LGIP + LGI)
    assert tables.profiles == {0: ["1g.10gb", "3g.40gb"]}
    assert tables.instances == {1: [("3g.40gb", 0), ("2g.20gb", 4)]}
    topo_file = tmp_path / "topo.txt"
    topo_file.write_text(OLD_DRIVER)
    mig_file = tmp_path / "mig.txt"
    mig_file.write_text(LGIP + LGI)
    profile, _ = import_files(topo=topo_file, mig=mig_file, name="migbox")
    topo = discover_profile(profile)
    assert topo.gpus[0].mig_enabled is True
    assert topo.gpus[0].mig_instances == ()
    placed = [(m.profile, m.placement_start) for m in topo.gpus[1].mig_instances]
    assert placed == [("3g.40gb", 0), ("2g.20gb", 4)]


def test_mig_garbage(tmp_path: Path) -> None:
    with pytest.raises(ImportError_, match="line 2: not a `nvidia-smi mig` table"):
        parse_mig_tables("+---+\nhello\n")
    with pytest.raises(ImportError_, match="no `nvidia-smi mig -lgip`"):
        parse_mig_tables("+---+\n")
    topo_file = tmp_path / "topo.txt"
    topo_file.write_text(OLD_DRIVER)
    mig_file = tmp_path / "mig.txt"
    mig_file.write_text(LGIP.replace("|   0  MIG", "|   5  MIG"))
    with pytest.raises(ImportError_, match="GPU 5 but the matrix has 2"):
        import_files(topo=topo_file, mig=mig_file)


def test_import_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tQQQ\n")
    with pytest.raises(ImportError_, match=r"bad\.txt: line 2: .*'QQQ'"):
        import_files(topo=bad)
    with pytest.raises(ImportError_, match="cannot read"):
        import_files(topo=tmp_path / "missing.txt")


@pytest.mark.parametrize("path", raw_topo_files(), ids=lambda p: p.name)
def test_every_real_matrix_round_trips(path: Path, raw_dir: Path) -> None:
    """import → profile → fake NVML + sysfs → discover → print == the real output, cell for cell."""
    profile, _ = import_files(topo=path)
    source = parse_topo(path.read_text())
    topo = discover_profile(profile)
    printed = parse_topo(format_topo_matrix(topo))
    assert printed.links == source.links
    assert printed.nic_links == source.nic_links
    if source.nic_nic_links is not None:
        assert printed.nic_nic_links == source.nic_nic_links
    for column, got, want in (
        ("CPU Affinity", printed.cpu_affinity, source.cpu_affinity),
        ("NUMA Affinity", printed.numa_affinity, source.numa_affinity),
        ("GPU NUMA ID", printed.gpu_numa_id, source.gpu_numa_id),
    ):
        if column in source.columns:
            assert got == want, column
    assert printed.nics == source.nics
    assert [nic.name for nic in topo.nics] == source.nics


def test_real_query_outputs_parse(raw_dir: Path) -> None:
    q = parse_query((raw_dir / "smi-q-8xh100-sxm-80gb-driver565-thamada.txt").read_text())
    assert q.driver_version == "565.57.01"
    assert len(q.gpus) == 8
    assert q.gpus[3].bus_id == "00000000:5D:00.0"
    assert all(g.fabric for g in q.gpus)
    assert {g.memory_mib for g in q.gpus} == {81559}
    a100 = parse_query((raw_dir / "smi-q-4xa100-sxm4-80gb-driver555-thamada.txt").read_text())
    assert [g.mig_enabled for g in a100.gpus] == [False] * 4
    assert a100.gpus[0].power_limit_w == 500.0


def test_real_mig_tables_parse(raw_dir: Path) -> None:
    lgip = parse_mig_tables(
        (raw_dir / "mig-lgip-4xh100-sxm5-80gb-stackhpc-slurm-appliance.txt").read_text()
    )
    assert sorted(lgip.profiles) == [0, 1, 2, 3]
    assert "7g.80gb" in lgip.profiles[0]
    lgi = parse_mig_tables((raw_dir / "mig-lgi-a30-24gb-4x1g6gb-summerlo.txt").read_text())
    assert lgi.instances[0] == [("1g.6gb", 0), ("1g.6gb", 1), ("1g.6gb", 2), ("1g.6gb", 3)]
