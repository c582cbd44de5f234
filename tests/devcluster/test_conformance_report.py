"""The conformance run's bookkeeping (devcluster/conformance.py, devcluster/e2e_binary.py): which
tests it leaves out and why, how ginkgo's JSON report becomes docs/conformance.md, and where the
e2e binary comes from. The run itself is ``make conformance`` (docs/testing.md)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest

from devcluster import conformance, e2e_binary
from devcluster.binaries import BinariesUnavailable

PREDICATES = "[sig-scheduling] SchedulerPredicates [Serial]"


def spec(leaf: str, state: str, message: str = "", kind: str = "It") -> dict[str, Any]:
    return {
        "ContainerHierarchyTexts": [PREDICATES],
        "LeafNodeText": leaf,
        "LeafNodeType": kind,
        "State": state,
        "RunTime": 2_500_000_000,
        "Failure": {"Message": message} if message else {},
    }


def test_the_skip_regex_leaves_out_exactly_the_listed_tests() -> None:
    regex = conformance.skip_regex(conformance.SKIPS)
    assert re.search(regex, "[sig-scheduling] X [Disruptive] kills a node")
    assert re.search(regex, "[sig-scheduling] X [Flaky] sometimes")
    assert not re.search(regex, f"{PREDICATES} validates resource limits [Conformance]")
    assert conformance.skip_reason("a [Flaky] one", conformance.SKIPS) == "upstream marks it flaky"
    assert conformance.skip_reason("a plain one", conformance.SKIPS) is None


def test_a_report_becomes_counts_a_table_and_the_reasons() -> None:
    report = [
        {
            "SpecReports": [
                spec("validates that NodeSelector is respected if matching", "passed"),
                spec(
                    "validates resource limits of pods that are allowed to run",
                    "failed",
                    "Timed out after 300s.\nExpected pod to be scheduled\nmore detail",
                ),
                spec("kills a node [Disruptive]", "skipped"),
                spec("spreads across zones", "skipped", "Requires at least 2 zones"),
                # Not sig-scheduling (the focus leaves other specs in the report as skipped).
                {**spec("other", "skipped"), "ContainerHierarchyTexts": ["[sig-node] Pods"]},
                spec("", "passed", kind="SynchronizedBeforeSuite"),
            ]
        }
    ]
    run = conformance.parse_report(report)
    assert (run.count("passed"), run.count("failed"), run.count("skipped")) == (1, 1, 2)
    failed = next(r for r in run.results if r.state == "failed")
    assert failed.reason == "Timed out after 300s. Expected pod to be scheduled"
    assert failed.seconds == pytest.approx(2.5)
    reasons = {r.name.removeprefix(PREDICATES + " "): r.reason for r in run.results}
    assert (
        reasons["kills a node [Disruptive]"]
        == "upstream marks it disruptive (restarts or breaks nodes)"
    )
    assert reasons["spreads across zones"] == "Requires at least 2 zones"
    run.seconds, run.nodes = 600.0, 2
    text = conformance.render(
        run, when=datetime.datetime(2026, 11, 29, 11, 0), machine="x86_64 Linux, 2 cores"
    )
    assert "**1 passed, 1 failed, 2 skipped** of 4." in text
    assert "2026-11-29 11:00 UTC on x86_64 Linux, 2 cores; 2 KWOK nodes; 10.0 min" in text
    assert (
        f"| {PREDICATES} validates that NodeSelector is respected if matching | passed | 2 |"
        in text
    )
    assert "## Failures" in text
    assert "## Skipped, and why" in text


def test_a_failed_suite_set_up_is_reported_even_with_no_test_results() -> None:
    report = [
        {"SpecReports": [spec("", "failed", "nodes not schedulable", "SynchronizedBeforeSuite")]}
    ]
    run = conformance.parse_report(report)
    assert run.results == []
    assert run.suite_failure == "SynchronizedBeforeSuite: nodes not schedulable"
    assert "The suite's set-up failed" in conformance.render(
        run, when=datetime.datetime(2026, 1, 1), machine="m"
    )


def test_nodes_spread_over_two_zones_and_are_handed_to_kwok() -> None:
    bodies = [conformance.node_body(i) for i in range(3)]
    zones = [b["metadata"]["labels"]["topology.kubernetes.io/zone"] for b in bodies]
    assert zones == ["zone-a", "zone-b", "zone-a"]
    assert all(b["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"} for b in bodies)


def test_the_e2e_binary_override_must_be_an_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "e2e.test"
    monkeypatch.setenv("TOPOS_E2E_TEST", str(missing))
    with pytest.raises(BinariesUnavailable, match=r"\$TOPOS_E2E_TEST is set but .*e2e.test"):
        e2e_binary.find()
    missing.write_text("#!/bin/sh\n")
    missing.chmod(0o755)
    assert e2e_binary.find() == missing


def test_the_e2e_binary_is_cached_beside_the_kubernetes_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOPOS_E2E_TEST", raising=False)
    monkeypatch.setenv("TOPOS_CACHE_DIR", str(tmp_path))
    assert e2e_binary.cache_dir() == tmp_path / "e2e" / "v1.36.3"
    assert e2e_binary.find() is None  # nothing built there: find never builds


def test_nodes_below_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        conformance.main(["--nodes", "0"])
    assert "--nodes: 0: at least one node is needed" in capsys.readouterr().err


def test_allocatable_follows_capacity_as_the_kubelets_status_sync_makes_it() -> None:
    node = {
        "status": {
            "capacity": {"cpu": "4", "example.com/beardsecond": "1000"},
            "allocatable": {"cpu": "4", "example.com/old": "5"},
        }
    }
    assert conformance.allocatable_patch(node) == {
        "status": {
            "allocatable": {"cpu": "4", "example.com/beardsecond": "1000", "example.com/old": None}
        }
    }
    same = {"status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}}
    assert conformance.allocatable_patch(same) is None


def test_a_failure_with_a_known_cause_says_it() -> None:
    leaf = "PodTopologySpread Preemption validates proper pods are preempted"
    run = conformance.parse_report([{"SpecReports": [spec(leaf, "failed", "timed out")]}])
    text = conformance.render(run, when=datetime.datetime(2026, 1, 1), machine="m")
    assert "timed out — *cause:* a Topos bug: preemption picks victims by resources alone" in text


def test_a_focused_run_lists_only_the_tests_it_focused_on() -> None:
    report = [
        {"SpecReports": [spec("PodGroup API availability", "passed"), spec("other", "skipped")]}
    ]
    run = conformance.parse_report(report, focus="PodGroup")
    assert [r.state for r in run.results] == ["passed"]
