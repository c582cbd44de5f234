"""What ``topos devcluster up --nodes`` needs built: the control plane's binaries and ``kwok``
(it brings its own KWOK stages), not kube-scheduler — so a fresh clone builds no more than that."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster.binaries import CORE_BINARIES, BinariesUnavailable, ensure


def _directory(path: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        (path / name).write_text("#!/bin/sh\n")
        (path / name).chmod(0o755)
    return path


def test_the_playground_needs_kwok_but_no_kube_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOPOS_K8S_BIN", str(_directory(tmp_path, (*CORE_BINARIES, "kwok"))))
    found = ensure(kwok=True)
    assert found.kwok == tmp_path / "kwok"
    assert found.kube_scheduler is None
    assert found.kwok_stages is None  # KWOK's stock stages are not used
    with pytest.raises(BinariesUnavailable, match="kube-scheduler"):
        ensure(extra=True)  # what the benchmarks ask for


def test_without_kwok_the_playground_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOPOS_K8S_BIN", str(_directory(tmp_path, CORE_BINARIES)))
    with pytest.raises(BinariesUnavailable, match="kwok"):
        ensure(kwok=True)
