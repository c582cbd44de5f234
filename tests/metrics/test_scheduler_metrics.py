"""``/metrics`` of a running coordinator, read the way a dashboard reads it: an in-memory
coordinator schedules pods, ``/metrics`` is scraped and parsed with ``prometheus_client``'s text
parser, and the seeds' PromQL (NeuroNetes' success rate, pending pods, GPU utilisation; the
topology scheduler's domain utilisation and placement decisions) is evaluated over two scrapes
against what happened: attempts by result, a pending gauge that goes up and down, latency
histograms whose counts equal the binds."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from coordinator.api.scheduling_metrics import MISMATCH
from coordinator.app.config.load import ConfigError, parse_config
from coordinator.app.config.sections import Config, MetricsSection
from coordinator.app.scheduler import RUNNING
from coordinator.engine.ports import ClusterError, PodRef
from devcluster.pods import gang_members, gpu_pod
from tests.support.metrics_coordinator import (
    MakeClient,
    bound,
    coordinator,
    scrape,
    settle,
    two_leaf_cluster,
)
from tests.support.polling import eventually
from tests.support.promql import histogram_quantile, rate
from tests.support.sched_hw import dgx_h100

NEURONETES = {
    "neuronetes_scheduler_latency_seconds",
    "neuronetes_scheduler_attempts_total",
    "neuronetes_scheduler_success_total",
    "neuronetes_scheduler_pending_pods",
    "neuronetes_gpu_utilization_percent",
    "neuronetes_scheduler_topology_violations_total",
}
TOPOLOGY_SCHEDULER = {
    "topology_scheduler_latency_seconds_count",
    "topology_domain_utilization_ratio",
    "topology_gpu_allocation_ratio",
    "topology_placement_decisions_total",
    "topology_scheduler_placement_duration_seconds_count",
    "topology_scheduler_recovery_duration_seconds_count",
    "topology_scheduler_domain_fragmentation_ratio",
    "topology_recovery_duration_seconds_count",
}


async def test_attempts_latency_and_pending_read_as_the_seeds_promql_says(
    aiohttp_client: MakeClient,
) -> None:
    cluster = two_leaf_cluster()
    client, app = await coordinator(aiohttp_client, cluster)
    await settle(app)
    s0 = await scrape(client)
    assert s0.value("topos_schedule_attempts_total") == 0
    assert s0.value("topos_pending_pods") == 0

    for name in ("a", "b", "c"):
        cluster.create_pod(gpu_pod(name, 4, namespace="default"))
    await settle(app)
    cluster.create_pod(gpu_pod("big", 8, namespace="default"))  # 4 GPUs are left: too few
    await settle(app)
    s1 = await scrape(client)

    placed = bound(cluster)
    assert sorted(placed) == ["a", "b", "c"]
    # kube-scheduler's names: attempts by result, their latency, pending pods by queue
    assert s1.value("topos_schedule_attempts_total", result="scheduled", profile="topos") == 3
    assert s1.value("topos_schedule_attempts_total", result="unschedulable") == 1
    assert s1.value("topos_schedule_attempts_total", result="error") == 0
    assert s1.value("topos_scheduling_attempt_duration_seconds_count", result="scheduled") == 3
    assert s1.value("topos_pod_scheduling_sli_duration_seconds_count") == len(placed)
    assert s1.value("topos_pod_scheduling_sli_duration_seconds_count", attempts="1") == 3
    assert s1.value("topos_pending_pods", queue="unschedulable") == 1
    assert s1.value("topos_pending_pods", queue="active") == 0
    assert s1.value("topos_pending_pods", queue="backoff") == 0
    p99 = histogram_quantile(
        0.99, s0, s1, "topos_scheduling_attempt_duration_seconds", result="scheduled"
    )
    assert 0 < p99 <= 1.0  # in memory, an attempt and its bind take well under a second

    # NeuroNetes (seed 000): success rate = rate(success) / rate(attempts)
    success_rate = rate(s0, s1, "neuronetes_scheduler_success_total") / rate(
        s0, s1, "neuronetes_scheduler_attempts_total"
    )
    assert success_rate == pytest.approx(3 / 4)
    assert s1.value("neuronetes_scheduler_pending_pods") == 1
    assert s1.value("neuronetes_gpu_utilization_percent") == pytest.approx(75.0)  # 12 of 16
    quantiles = s1.series("neuronetes_scheduler_latency_seconds")  # the bare name graphs these
    assert {dict(k)["quantile"] for k in quantiles} == {"0.5", "0.9", "0.99"}
    q = {dict(k)["quantile"]: v for k, v in quantiles.items()}
    assert 0 <= q["0.5"] <= q["0.9"] <= q["0.99"] < 1.0
    assert s1.value("neuronetes_scheduler_latency_seconds_count") == 4
    assert rate(s0, s1, "neuronetes_scheduler_topology_violations_total") == 0

    # the topology scheduler (seeds 003/004): decisions, allocation, per-domain utilisation
    assert s1.value("topology_placement_decisions_total", result="placed") == 3
    assert s1.value("topology_placement_decisions_total", result="unschedulable") == 1
    assert s1.value("topology_gpu_allocation_ratio") == pytest.approx(0.75)
    assert s1.value("topology_scheduler_placement_duration_seconds_count") == 3
    used = {"leaf-1": 0, "leaf-2": 0}
    for node in placed.values():
        used["leaf-1" if node == "n1" else "leaf-2"] += 4
    for leaf, gpus in used.items():
        ratio = s1.value("topology_domain_utilization_ratio", tier="leaf", domain=leaf)
        assert ratio == pytest.approx(gpus / 8)
        assert s1.value("topos_domain_gpu_utilization_ratio", tier="leaf", domain=leaf) == ratio
        # a leaf whose node is half used strands all its free GPUs; a full or empty one none
        fragmentation = 1.0 if gpus == 4 else 0.0
        assert s1.value(
            "topology_scheduler_domain_fragmentation_ratio", tier="leaf", domain=leaf
        ) == pytest.approx(fragmentation)
    assert s1.value("topos_domain_gpu_utilization_ratio", tier="spine", domain="spine-1") == 0.75

    # a bound pod ends: the big one fits now, on its second attempt; nothing is pending
    freed = next(name for name, node in placed.items() if list(placed.values()).count(node) == 1)
    cluster.finish_pod("default", freed)
    await eventually(lambda: "big" in bound(cluster), what="the big pod bound", timeout_s=15)
    await settle(app)
    s2 = await scrape(client)
    assert s2.value("topos_pending_pods") == 0
    assert s2.value("neuronetes_scheduler_pending_pods") == 0
    assert s2.value("topos_schedule_attempts_total", result="scheduled") == 4
    assert s2.value("topos_pod_scheduling_sli_duration_seconds_count", attempts="2") == 1
    assert s2.value("topos_pod_scheduling_attempts_count") == 4
    assert rate(s1, s2, "neuronetes_scheduler_success_total") == pytest.approx(
        rate(s1, s2, "neuronetes_scheduler_attempts_total")
    )
    assert s2.value("topology_gpu_allocation_ratio") == pytest.approx(1.0)


async def test_a_spec_error_counts_as_unschedulable_and_waits_in_that_queue(
    aiohttp_client: MakeClient,
) -> None:
    cluster = two_leaf_cluster()
    client, app = await coordinator(aiohttp_client, cluster)
    bad = gpu_pod("bad", 1, namespace="default", annotations={"topos.io/numa-policy": "sideways"})
    cluster.create_pod(bad)
    await settle(app)
    s = await scrape(client)
    assert s.value("topos_schedule_attempts_total", result="unschedulable") == 1
    assert s.value("topos_schedule_attempts_total", result="scheduled") == 0
    assert s.value("topos_pending_pods", queue="unschedulable") == 1
    assert math.isclose(s.value("neuronetes_scheduler_success_total"), 0)


@pytest.mark.parametrize(
    ("compat", "present"),
    [
        ((), set()),
        (("neuronetes",), NEURONETES),
        (("topology-scheduler",), TOPOLOGY_SCHEDULER),
        (("neuronetes", "topology-scheduler"), NEURONETES | TOPOLOGY_SCHEDULER),
    ],
)
async def test_seed_names_are_exported_only_when_their_set_is_on(
    aiohttp_client: MakeClient, compat: tuple[str, ...], present: set[str]
) -> None:
    cluster = two_leaf_cluster()
    config = Config(metrics=MetricsSection(compat=compat))
    client, app = await coordinator(aiohttp_client, cluster, config)
    cluster.create_pod(gpu_pod("a", 2, namespace="default"))
    await settle(app)
    names = (await scrape(client)).names()
    seed_names = {n for n in names if n.startswith(("neuronetes_", "topology_"))}
    assert {n for n in NEURONETES | TOPOLOGY_SCHEDULER if n in names} == present
    assert {n.split("_")[0] for n in seed_names} == {n.split("_")[0] for n in present}
    assert "topos_schedule_attempts_total" in names  # Topos's own names are always there


def test_an_unknown_metric_set_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"metrics": {"compat": ["neuronetes", "kubenexus"]}}, source="F")
    assert "metrics" in str(caught.value)
    assert "kubenexus" in str(caught.value)
    assert "neuronetes, topology-scheduler" in str(caught.value)


async def test_preemption_and_gangs_show_up(aiohttp_client: MakeClient) -> None:
    cluster = two_leaf_cluster()
    client, app = await coordinator(aiohttp_client, cluster)
    for i in range(2):
        cluster.create_pod(gpu_pod(f"low-{i}", 8, namespace="default", priority=0))
    await settle(app)
    s0 = await scrape(client)
    assert s0.value("topos_preemption_attempts_total") == 0
    for member in gang_members("train", 2, gpus=4, namespace="default", priority=100):
        cluster.create_pod(member)
    cluster.create_pod(gpu_pod("urgent", 8, namespace="default", priority=100))
    await eventually(
        lambda: {"train-0", "train-1", "urgent"} <= set(bound(cluster)),
        what="the high-priority pods bound after preemption",
        timeout_s=30,
    )
    await settle(app)
    s1 = await scrape(client)
    evicted = {"low-0", "low-1"} - {p["metadata"]["name"] for p in cluster.pods()}
    assert evicted == {"low-0", "low-1"}
    assert s1.value("topos_preemption_attempts_total") >= 2  # the gang's and the pod's
    assert s1.value("topos_preemption_victims_count") == 2  # one victim each time
    assert s1.value("topos_preemption_victims_sum") == 2
    assert s1.value("topos_gangs", phase="Bound") == 1
    assert s1.value("topos_gangs", phase="Pending") == 0
    scheduled = s1.value("topos_schedule_attempts_total", result="scheduled")
    assert scheduled == s1.value(
        "topos_scheduling_attempt_duration_seconds_count", result="scheduled"
    )
    assert scheduled == len(bound(cluster)) + len(evicted)  # every bind, the evicted ones too


async def test_a_gang_recovery_and_a_failed_bind_are_timed_and_counted(
    aiohttp_client: MakeClient,
) -> None:
    cluster = two_leaf_cluster()
    spare = {"topos.io/leaf": "leaf-1", "topos.io/spine": "spine-1"}
    cluster.add_node("n3", labels=spare, topology=dgx_h100("n3"))
    client, app = await coordinator(aiohttp_client, cluster)
    members = gang_members("w", 2, gpus=8, namespace="default")
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "w", "uid": "uid-w", "controller": True}
    for member in members:
        member["metadata"]["ownerReferences"] = [job]  # recovery moves what a controller remakes
        cluster.create_pod(member)
    await eventually(lambda: len(bound(cluster)) == 2, what="the gang bound", timeout_s=15)
    await settle(app)
    s0 = await scrape(client)
    assert s0.value("topos_recovery_duration_seconds_count") == 0

    failed = bound(cluster)["w-0"]
    cluster.update_node(failed, ready=False)  # its member is evicted; its controller makes anew
    await eventually(lambda: "w-0" not in bound(cluster), what="w-0 evicted", timeout_s=15)
    cluster.create_pod(members[0])
    await eventually(lambda: len(bound(cluster)) == 2, what="the gang bound again", timeout_s=30)
    await settle(app)
    s1 = await scrape(client)
    assert bound(cluster)["w-0"] != failed
    for name in (
        "topos_recovery_duration_seconds",
        "topology_scheduler_recovery_duration_seconds",
        "topology_recovery_duration_seconds",
    ):
        assert s1.value(f"{name}_count") == 1
        assert 0 < s1.value(f"{name}_sum") < 30  # the seeds' target: back in under 30 s

    cluster.update_node(failed, ready=True)  # room for one more pod
    real_bind = cluster.bind

    async def refused(pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        cluster.bind = real_bind  # type: ignore[method-assign]
        raise ClusterError(f"the API server refused to bind {pod.key}")

    cluster.bind = refused  # type: ignore[method-assign]
    cluster.create_pod(gpu_pod("once", 1, namespace="default"))
    await eventually(lambda: "once" in bound(cluster), what="the retried bind", timeout_s=15)
    await settle(app)
    s2 = await scrape(client)
    assert s2.value("topos_schedule_attempts_total", result="error") == 1
    assert s2.value("topos_scheduling_attempt_duration_seconds_count", result="error") == 1
    assert s2.value("topology_placement_decisions_total", result="error") == 1
    assert rate(s1, s2, "topos_schedule_attempts_total", result="scheduled") > 0
    # the pod's end-to-end latency counts both attempts, from when it was first seen
    assert s2.value("topos_pod_scheduling_sli_duration_seconds_count", attempts="2") == 1


async def test_a_topology_violation_reported_by_the_engine_reaches_both_counters(
    aiohttp_client: MakeClient,
) -> None:
    client, app = await coordinator(aiohttp_client, two_leaf_cluster())
    await settle(app)
    s0 = await scrape(client)
    assert s0.value("topos_topology_violations_total", reason=MISMATCH) == 0
    runtime = app[RUNNING].runtime
    assert runtime is not None
    # what the device-plugin mismatch check calls when a pod got other GPUs than were chosen
    runtime.scheduler.observer.topology_violation(MISMATCH)
    runtime.scheduler.observer.topology_violation(MISMATCH)
    s1 = await scrape(client)
    assert s1.value("topos_topology_violations_total", reason=MISMATCH) == 2
    assert s1.value("neuronetes_scheduler_topology_violations_total") == 2


async def test_moves_are_counted_by_trigger_apart_from_preemption(
    aiohttp_client: MakeClient,
) -> None:
    cluster = two_leaf_cluster()
    client, app = await coordinator(aiohttp_client, cluster)
    await settle(app)
    before = await scrape(client)
    for name in (
        "topos_defragmentation_attempts_total",
        "topos_defragmentation_moves_total",
        "topos_defragmentation_moved_pods_total",
    ):
        for trigger in ("waiting", "gather", "compaction"):  # rate() works from the start
            assert before.value(name, trigger=trigger) == 0
    runtime = app[RUNNING].runtime
    assert runtime is not None
    observer = runtime.scheduler.observer
    observer.defragmentation_attempted("gather")  # what the preemptor says for a gathering
    observer.moved("gather", 2)
    after = await scrape(client)
    assert after.value("topos_defragmentation_attempts_total", trigger="gather") == 1
    assert after.value("topos_defragmentation_moves_total", trigger="gather") == 1
    assert after.value("topos_defragmentation_moved_pods_total", trigger="gather") == 2
    assert after.value("topos_defragmentation_moves_total", trigger="waiting") == 0
    assert after.value("topos_preemption_attempts_total") == 0
