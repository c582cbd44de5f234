"""scheduler_perf's workload YAML read as upstream wrote it (``benchmarks/scheduler_perf.py``), its
refusals, and a quick run: SchedulingBasic/5Nodes on KWOK, kube-scheduler and Topos in turn, every
measured pod bound by each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks import scheduler_perf
from benchmarks import scheduler_perf_workload as workload_yaml
from benchmarks.kwok_cluster import parse_limits
from devcluster.binaries import BinariesUnavailable, find


@pytest.fixture(scope="module")
def upstream_config() -> Path:
    try:
        directory = workload_yaml.module_dir()
    except BinariesUnavailable as exc:
        pytest.skip(f"the k8s.io/kubernetes module is not available: {exc}")
    return directory / workload_yaml.PERF_DIR / "misc" / "performance-config.yaml"


def test_scheduling_basic_is_read_from_upstream_yaml(upstream_config: Path) -> None:
    small = workload_yaml.load_workload(upstream_config, "SchedulingBasic", "5Nodes")
    assert small.node_count == 5
    assert small.measured_pods == 10
    assert [(s.count, s.measured) for s in small.pods] == [(5, False), (10, True)]
    node, status = scheduler_perf.node_body(small.nodes[0].template.render(), 3)
    assert node["metadata"]["name"] == "scheduler-perf-00003"  # the template's generateName
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert status["capacity"] == {"pods": "110", "cpu": "4", "memory": "32Gi"}
    pod = scheduler_perf.pod_body(small.pods[1].template.render(), "p-1", "topos")
    assert pod["spec"]["schedulerName"] == "topos"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "100m",
        "memory": "500Mi",
    }
    big = workload_yaml.load_workload(upstream_config, "SchedulingBasic", "5000Nodes")
    assert big.node_count == 5000


def test_other_cases_namespaces_node_labels_churn_and_overrides(upstream_config: Path) -> None:
    base = upstream_config.parent.parent
    anti = workload_yaml.load_workload(
        base / "affinity" / "performance-config.yaml", "SchedulingPodAntiAffinity", "500Nodes"
    )
    assert anti.namespaces == ("sched-0", "sched-1")  # the template's anti-affinity names them
    assert [(s.count, s.measured, s.namespace) for s in anti.pods] == [
        (100, False, "sched-0"),
        (400, True, "sched-1"),
    ]
    spread = workload_yaml.load_workload(
        base / "topology_spreading" / "performance-config.yaml", "TopologySpreading", "500Nodes"
    )
    assert spread.nodes[0].label == ("topology.kubernetes.io/zone", ("moon-1", "moon-2", "moon-3"))
    node, _ = scheduler_perf.node_body(
        spread.nodes[0].template.render(), 4, {"topology.kubernetes.io/zone": "moon-2"}
    )
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "moon-2"
    unschedulable = workload_yaml.load_workload(
        upstream_config, "Unschedulable", "500Nodes/10Init/1kPods"
    )
    (churn,) = unschedulable.churn
    assert (churn.mode, churn.interval_s, churn.number) == ("create", 0.2, 0)
    template, resource = churn.templates[0]
    assert resource.kind == "Pod"
    assert template["spec"]["priority"] == 10
    smaller = workload_yaml.load_workload(
        upstream_config,
        "PreemptionBasic",
        "1000Nodes",
        workload_yaml.parse_params(["initNodes=500", "initPods=2000", "measurePods=500"]),
    )
    assert (smaller.node_count, smaller.measured_pods) == (500, 500)


def test_unknown_cases_workloads_and_opcodes_are_named(
    upstream_config: Path, tmp_path: Path
) -> None:
    with pytest.raises(workload_yaml.WorkloadError, match="'NoSuchCase' is not in"):
        workload_yaml.load_workload(upstream_config, "NoSuchCase", "5Nodes")
    with pytest.raises(workload_yaml.WorkloadError, match="no workload '7Nodes'"):
        workload_yaml.load_workload(upstream_config, "SchedulingBasic", "7Nodes")
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: Sleepy\n  workloadTemplate:\n  - opcode: sleep\n"
        "  workloads:\n  - name: small\n    params: {}\n"
    )
    with pytest.raises(workload_yaml.WorkloadError, match=r"\[0\]\.opcode: 'sleep'"):
        workload_yaml.load_workload(config, "Sleepy", "small")
    config.write_text(
        "- name: Churny\n  workloadTemplate:\n  - opcode: churn\n    mode: sometimes\n"
        "    templatePaths: [pod.yaml]\n"
        "  workloads:\n  - name: small\n    params: {}\n"
    )
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    with pytest.raises(workload_yaml.WorkloadError, match=r"\[0\]\.mode: 'sometimes'"):
        workload_yaml.load_workload(config, "Churny", "small")
    with pytest.raises(workload_yaml.WorkloadError, match="--param initNodes='many'"):
        workload_yaml.parse_params(["initNodes=many"])
    config.write_text(
        "- name: C\n  workloadTemplate:\n  - opcode: createNodes\n    countParam: $nodes\n"
        "  workloads:\n  - name: w\n    params: {initNodes: 5}\n"
    )
    with pytest.raises(workload_yaml.WorkloadError, match=r"countParam: '\$nodes'"):
        workload_yaml.load_workload(config, "C", "w")


def test_quick_run_both_schedulers_bind_every_measured_pod(upstream_config: Path) -> None:
    found = find(extra=True)
    if found is None or found.kwok is None or found.kube_scheduler is None:
        pytest.skip("kwok / kube-scheduler not built (python -m devcluster.binaries ensure --all)")
    workload = workload_yaml.load_workload(upstream_config, "SchedulingBasic", "5Nodes")
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
        # Every Scheduled Event written by the last bind, or the CPU read again once they were.
        if run.scheduled_events < 10:
            assert run.events_after_s > 0
            assert run.cpu_events_s >= run.cpu_s


def _run(
    scheduler: str, *, seconds: float, cpu_s: float, requests: int, created_s: float = 0.5
) -> scheduler_perf.PerfRun:
    """A finished run of 10 pods: sent at 0 (all created in ``created_s``), the last bound at
    ``seconds``."""
    run = scheduler_perf.PerfRun(scheduler, parse_limits("unlimited")[0], 10)
    run.created_s = created_s
    run.sent = {f"p-{i}": 0.0 for i in range(10)}
    run.bound = {f"p-{i}": seconds * (i + 1) / 10 for i in range(10)}
    run.cpu_s = cpu_s
    run.requests[("POST", "pods", "binding")] = requests
    return run


def test_repeat_alternates_the_order_and_the_median_is_taken_per_figure() -> None:
    order = ["kube-scheduler", "topos"]
    assert scheduler_perf.alternated(order, 3) == [
        "kube-scheduler",
        "topos",
        "topos",
        "kube-scheduler",
        "kube-scheduler",
        "topos",
    ]
    runs = [
        # round 1: Topos twice as fast, same CPU
        _run("kube-scheduler", seconds=2.0, cpu_s=0.010, requests=20),
        _run("topos", seconds=1.0, cpu_s=0.010, requests=20),
        # round 2, Topos first: as fast, half the CPU; its pods were created half as fast
        _run("topos", seconds=1.0, cpu_s=0.005, requests=20, created_s=1.0),
        _run("kube-scheduler", seconds=1.0, cpu_s=0.010, requests=20),
        # round 3: half as fast, 0.8x the CPU, 1.5x the requests
        _run("kube-scheduler", seconds=1.0, cpu_s=0.010, requests=20),
        _run("topos", seconds=2.0, cpu_s=0.008, requests=30),
    ]
    rounds = scheduler_perf.round_ratios(runs, len(order))
    assert [(r.pods_per_s, r.cpu_per_pod, r.requests_per_pod, r.kept_up) for r in rounds] == [
        pytest.approx((2.0, 1.0, 1.0, 2.0)),
        pytest.approx((1.0, 0.5, 1.0, 2.0)),  # kept up with twice the share of its creation rate
        pytest.approx((0.5, 0.8, 1.5, 0.5)),
    ]
    median = scheduler_perf.median_ratio(rounds)
    # each figure's own median: no round has these four together
    assert (
        median.pods_per_s,
        median.cpu_per_pod,
        median.requests_per_pod,
        median.kept_up,
    ) == pytest.approx((1.0, 0.8, 1.0, 2.0))
    assert "pods/s 1.00x (of the creation rate 2.00x), CPU per pod 0.80x" in median.line(
        " (median of 3)"
    )
    # a round of one scheduler only has no ratio
    assert scheduler_perf.round_ratios(runs[:1] + runs[:1], 2) == []


def test_repeat_below_one_is_refused_naming_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(workload_yaml.WorkloadError, match="--repeat 0"):
        scheduler_perf.alternated(["kube-scheduler", "topos"], 0)
    with pytest.raises(SystemExit) as exited:
        scheduler_perf.main(["--repeat", "-1", "--config", "/nonexistent.yaml"])
    assert exited.value.code == 2
    assert "--repeat -1: give at least one round" in capsys.readouterr().err
