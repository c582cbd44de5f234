"""``topos discover`` and ``topos profile``: what a user sees (stdout, stderr, exit status)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from common.model import topology_from_json
from tests.support.nvml import real_nvml_loads


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_discover_profile_json_is_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "discover", "--profile", "dgx-a100", "--hostname", "n7", "--json")
    assert code == 0
    assert err == ""
    topo = topology_from_json(out)
    assert topo.hostname == "n7"
    assert len(topo.gpus) == 8
    assert topo.nvswitch


def test_discover_topo_prints_the_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "discover", "--profile", "pcie-8x", "--topo")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split("\t")[1:4] == ["GPU0", "GPU1", "GPU2"]
    assert lines[1].split("\t")[:6] == ["GPU0", " X ", "PIX", "NODE", "NODE", "SYS"]
    assert "NIC Legend:" in out
    assert "  NIC0: mlx5_0" in out


def test_discover_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "discover", "--profile", "a100-mig")
    assert code == 0
    assert "NVIDIA A100-SXM4-40GB" in out
    assert "3g.20gb" in out
    assert "still creatable" in out


def test_unknown_profile_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "discover", "--profile", "nope")
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("topos: unknown profile 'nope'")


@pytest.mark.skipif(real_nvml_loads(), reason="this machine has an NVIDIA driver")
def test_discover_without_a_driver(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "discover")
    assert code != 0
    assert out == ""
    assert err.count("\n") == 1
    assert "NVML is not available" in err
    assert "Traceback" not in err


def test_profile_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "profile", "list")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    for name in ("dgx1-v100", "dgx-a100", "dgx-h100", "pcie-8x", "ws-4x-nvlink", "a100-mig"):
        assert name in names
    assert "INVALID" not in out


def test_profile_import_then_discover(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    topo = tmp_path / "box.txt"
    topo.write_text(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\t0-15\t0\nGPU1\tNV4\t X \t16-31\t1\n"
    )
    out_file = tmp_path / "box.yaml"
    code, out, err = run(capsys, "profile", "import", "--topo", str(topo), "-o", str(out_file))
    assert code == 0
    assert "wrote profile 'box'" in err
    code, out, _ = run(capsys, "discover", "--profile", str(out_file), "--topo")
    assert code == 0
    assert out.splitlines()[1].split("\t")[:5] == ["GPU0", " X ", "NV4", "0-15", "0"]
    assert out.splitlines()[2].split("\t")[:5] == ["GPU1", "NV4", " X ", "16-31", "1"]


def test_profile_import_garbage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    topo = tmp_path / "junk.txt"
    topo.write_text("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPXB\t X \n")
    code, out, err = run(capsys, "profile", "import", "--topo", str(topo))
    assert code == 1
    assert out == ""
    assert "junk.txt: line 3:" in err
    assert err.count("\n") == 1


def test_profile_import_notes_truncation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    topo = tmp_path / "cut.txt"
    topo.write_text("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV2\tSYS\nGPU1\tNV2\t X \tSYS\n")
    code, out, err = run(capsys, "profile", "import", "--topo", str(topo))
    assert code == 0
    assert "note: rows GPU2 missing" in err
    assert "links:\n- X NV2\n- NV2 X\n" in out
