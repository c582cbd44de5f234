"""scheduler_perf's workload YAML read as upstream wrote it (``benchmarks/scheduler_perf.py``), its
refusals, and a quick run: SchedulingBasic/5Nodes on KWOK, kube-scheduler and Topos in turn, every
measured pod bound by each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks import scheduler_perf
from benchmarks.kwok_cluster import parse_limits
from devcluster.binaries import BinariesUnavailable, find


@pytest.fixture(scope="module")
def upstream_config() -> Path:
    try:
        directory = scheduler_perf.module_dir()
    except BinariesUnavailable as exc:
        pytest.skip(f"the k8s.io/kubernetes module is not available: {exc}")
    return directory / scheduler_perf.PERF_DIR / "misc" / "performance-config.yaml"


def test_scheduling_basic_is_read_from_upstream_yaml(upstream_config: Path) -> None:
    small = scheduler_perf.load_workload(upstream_config, "SchedulingBasic", "5Nodes")
    assert small.node_count == 5
    assert small.measured_pods == 10
    assert [(s.count, s.measured) for s in small.pods] == [(5, False), (10, True)]
    node, status = scheduler_perf.node_body(small.nodes[0].template, 3)
    assert node["metadata"]["name"] == "perf-node-00003"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert status["capacity"] == {"pods": "110", "cpu": "4", "memory": "32Gi"}
    pod = scheduler_perf.pod_body(small.pods[1].template, "p-1", "topos")
    assert pod["spec"]["schedulerName"] == "topos"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "100m",
        "memory": "500Mi",
    }
    big = scheduler_perf.load_workload(upstream_config, "SchedulingBasic", "5000Nodes")
    assert big.node_count == 5000


def test_unknown_cases_workloads_and_opcodes_are_named(
    upstream_config: Path, tmp_path: Path
) -> None:
    with pytest.raises(scheduler_perf.WorkloadError, match="'NoSuchCase' is not in"):
        scheduler_perf.load_workload(upstream_config, "NoSuchCase", "5Nodes")
    with pytest.raises(scheduler_perf.WorkloadError, match="no workload '7Nodes'"):
        scheduler_perf.load_workload(upstream_config, "SchedulingBasic", "7Nodes")
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: Churny\n  workloadTemplate:\n  - opcode: churn\n"
        "  workloads:\n  - name: small\n    params: {}\n"
    )
    with pytest.raises(scheduler_perf.WorkloadError, match=r"\[0\]\.opcode: 'churn'"):
        scheduler_perf.load_workload(config, "Churny", "small")
    config.write_text(
        "- name: C\n  workloadTemplate:\n  - opcode: createNodes\n    countParam: $nodes\n"
        "  workloads:\n  - name: w\n    params: {initNodes: 5}\n"
    )
    with pytest.raises(scheduler_perf.WorkloadError, match=r"countParam: '\$nodes'"):
        scheduler_perf.load_workload(config, "C", "w")


def test_quick_run_both_schedulers_bind_every_measured_pod(upstream_config: Path) -> None:
    found = find(extra=True)
    if found is None or found.kwok is None or found.kube_scheduler is None:
        pytest.skip("kwok / kube-scheduler not built (python -m devcluster.binaries ensure --all)")
    workload = scheduler_perf.load_workload(upstream_config, "SchedulingBasic", "5Nodes")
    runs = asyncio.run(
        scheduler_perf.bench(
            workload,
            limit=parse_limits("unlimited")[0],
            order=["kube-scheduler", "topos"],
            timeout_s=120,
        )
    )
    assert [r.scheduler for r in runs] == ["kube-scheduler", "topos"]
    for run in runs:
        assert not run.timed_out
        assert len(run.bound) == 10  # the measured pods, not the 5 created before
        assert run.rate > 0
        assert run.requests["POST", "pods", "binding"] == 10  # one bind per pod, nothing more
