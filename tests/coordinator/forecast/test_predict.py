"""A predicted start time: the engine run forward on a copy of the cluster, each running pod
ending when its runtime source says, the pending pods in queue order — and the runtime sources
themselves."""

from __future__ import annotations

import time
from typing import Any

import pytest

import coordinator.forecast.predict as predict_module
from agent.devices import discover_profile
from coordinator.core.framework.results import ScheduleResult
from coordinator.core.queue import QueuedPod
from coordinator.engine.loop import Scheduler
from coordinator.forecast.predict import (
    ClusterCopy,
    NodeCopy,
    RunningCopy,
    fits_nowhere,
    predict_start,
    predict_starts,
)
from coordinator.forecast.runtimes import (
    EXPECTED_DURATION,
    Runtime,
    RuntimeHistory,
    expected_duration,
    expected_runtime,
)
from devcluster.pods import pod

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
STARTED = "2026-01-01T00:00:00Z"


def node(name: str) -> NodeCopy:
    obj = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    return NodeCopy(obj, discover_profile("dgx-h100", hostname=name))


def running(name: str, on: str, left_s: float | None, gpus: int = 8) -> RunningCopy:
    obj = pod(name, gpus=gpus, node=on)
    source = "annotation" if left_s is not None else "unknown"
    return RunningCopy(obj, Runtime(left_s, source))


def test_a_pod_waiting_for_a_full_node_starts_when_the_first_running_pod_ends() -> None:
    copy = ClusterCopy(
        nodes=[node("gpu-0"), node("gpu-1")],
        running=[running("train-7", "gpu-0", 2400), running("train-9", "gpu-1", 3600)],
        pending=[pod("train-8", gpus=8)],
    )
    began = time.perf_counter()
    p = predict_start(copy, "default/train-8")
    assert time.perf_counter() - began < 10  # an hour of simulated time
    assert p.starts_in_s == pytest.approx(2400, abs=15)  # its end (within the queue's backoff)
    assert p.node == "gpu-0"
    assert p.after == ("default/train-7",)
    assert p.sources == {"default/train-7": "annotation"}
    assert p.message == "expected to start in ~40 min, when train-7 ends"


def test_the_queue_ahead_of_it_goes_first() -> None:
    """A higher-priority pod of the same shape, pending too, takes the first node that frees."""
    copy = ClusterCopy(
        nodes=[node("gpu-0"), node("gpu-1")],
        running=[running("a", "gpu-0", 600), running("b", "gpu-1", 1800)],
        pending=[pod("urgent", gpus=8, priority=100), pod("mine", gpus=8)],
    )
    p = predict_start(copy, "default/mine")
    assert p.starts_in_s == pytest.approx(1800, abs=15)
    assert p.node == "gpu-1"
    assert p.after == ("default/b",)


def test_one_run_predicts_every_pending_pod_in_queue_order() -> None:
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        running=[running("now", "gpu-0", 600)],
        pending=[pod("first", gpus=8), pod("second", gpus=8)],
    )
    # "first" is ahead; once started its end is unknown: "second" has no predicted start.
    got = predict_starts(copy, horizon_s=3_600)
    assert set(got) == {"default/first", "default/second"}
    assert got["default/first"].starts_in_s == pytest.approx(600, abs=15)
    assert got["default/second"].starts_in_s is None


def test_a_higher_priority_pod_preempts_as_the_engine_would() -> None:
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        running=[running("low", "gpu-0", 7_200)],
        pending=[pod("urgent", gpus=8, priority=1000)],
    )
    p = predict_start(copy, "default/urgent")
    assert p.starts_in_s is not None
    assert p.starts_in_s < 60  # the victim is evicted, not waited for
    assert p.after == ()


def test_a_pod_that_fits_now_starts_now() -> None:
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        running=[running("half", "gpu-0", None, gpus=4)],
        pending=[pod("small", gpus=4)],
    )
    p = predict_start(copy, "default/small")
    assert p.starts_in_s is not None
    assert p.starts_in_s < 1
    assert p.message == "expected to start now"


def test_behind_a_pod_with_no_known_end_there_is_no_prediction() -> None:
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        running=[running("forever", "gpu-0", None)],
        pending=[pod("next", gpus=8)],
    )
    p = predict_start(copy, "default/next", horizon_s=86_400)
    assert p.starts_in_s is None
    assert p.message == "no start expected within 24 h (1 running pod with no expected end)"


def test_pods_nothing_in_the_run_can_help_are_tried_once_not_every_minute_to_the_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cordoned node: the pods waiting for it are tried, fail, and wait for a change the run
    never makes. The live queue's one-minute safety net would retry each of them every simulated
    minute for 24 h (20 pods: 10 s of the forecast worker's CPU at every refresh)."""
    cordoned = node("gpu-0")
    cordoned = NodeCopy({**cordoned.obj, "spec": {"unschedulable": True}}, cordoned.topology)
    copy = ClusterCopy(
        nodes=[cordoned],
        running=[running("forever", "gpu-0", None, gpus=1)],
        pending=[pod(f"w-{i}", gpus=1) for i in range(20)],
    )
    attempts = 0
    schedule = Scheduler.schedule

    async def counted(self: Scheduler, entry: QueuedPod) -> ScheduleResult:
        nonlocal attempts
        attempts += 1
        return await schedule(self, entry)

    monkeypatch.setattr(Scheduler, "schedule", counted)
    got = predict_starts(copy, horizon_s=86_400)
    assert {p.message for p in got.values()} == {
        "no start expected within 24 h (1 running pod with no expected end)"
    }
    assert attempts <= 2 * len(copy.pending)  # each once (a retry on a stale view at most)


def cpu_node(name: str, cpu: str) -> NodeCopy:
    status = {
        "conditions": [{"type": "Ready", "status": "True"}],
        "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
    }
    return NodeCopy({"metadata": {"name": name}, "status": status})


def test_a_pod_larger_than_every_node_never_starts_and_is_left_out_of_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    copy = ClusterCopy(
        nodes=[cpu_node("cpu-0", "4"), cpu_node("cpu-1", "4")],
        running=[
            RunningCopy(pod("w", cpu="4", node="cpu-0"), Runtime(600, "annotation")),
            RunningCopy(pod("v", cpu="4", node="cpu-1"), Runtime(None, "unknown")),
        ],
        pending=[pod("huge", cpu="9"), pod("next", cpu="4")],
    )
    got = predict_starts(copy)
    assert got["default/huge"].starts_in_s is None
    assert got["default/huge"].message == "no start expected within 7 d"
    assert got["default/next"].starts_in_s == pytest.approx(600, abs=15)  # as without it
    assert list(got) == ["default/huge", "default/next"]  # asked order

    # Asked about it alone, no engine is run forward at all.
    def no_engine(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the engine was run forward for a pod no node can hold")

    monkeypatch.setattr(predict_module, "SimulatedEngine", no_engine)
    assert predict_start(copy, "default/huge").starts_in_s is None


def test_a_node_with_room_or_no_stated_allocatable_keeps_a_big_pod_in_the_run() -> None:
    big = pod("big", cpu="9")
    assert fits_nowhere(big, [cpu_node("a", "4"), cpu_node("b", "4")])
    assert not fits_nowhere(big, [cpu_node("a", "4"), cpu_node("b", "16")])
    assert not fits_nowhere(big, [cpu_node("a", "4"), node("gpu-0")])  # no allocatable stated
    assert not fits_nowhere(big, [cpu_node("a", "many")])  # unreadable: it might fit
    assert not fits_nowhere(pod("gpus", gpus=8, cpu=None, memory=None), [cpu_node("a", "4")])


def labelled(
    name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None
) -> NodeCopy:
    found = node(name)
    obj = {
        **found.obj,
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or []},
    }
    return NodeCopy(obj, found.topology)


def test_a_pod_no_node_admits_by_labels_or_taints_is_answered_without_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No end of a running pod changes a node's labels, name or taints: a pod every node refuses
    on those never starts, and is answered at once (the forward run would retry it to the
    horizon at every refresh)."""
    dedicated = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    nodes = [labelled("gpu-0", {"pool": "train"}), labelled("gpu-1", {"pool": "infer"}, dedicated)]
    gone = pod("gone", gpus=1)
    gone["spec"]["nodeSelector"] = {"pool": "batch"}  # no node has it
    infer = pod("infer", gpus=1)
    infer["spec"]["nodeSelector"] = {"pool": "infer"}  # the node has it but is tainted
    named = pod("named", gpus=1)
    named["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]}
                ]
            }
        }
    }
    for never in (gone, infer, named):
        assert fits_nowhere(never, nodes), never["metadata"]["name"]
    tolerant = pod("tolerant", gpus=1)
    tolerant["spec"]["nodeSelector"] = {"pool": "infer"}
    tolerant["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    assert not fits_nowhere(tolerant, nodes)
    assert not fits_nowhere(pod("plain", gpus=1), nodes)
    broken = pod("broken", gpus=1)
    broken["spec"]["tolerations"] = [{"operator": "Sometimes"}]  # unreadable: the run decides
    assert not fits_nowhere(broken, nodes)

    copy = ClusterCopy(
        nodes=nodes,
        running=[running("a", "gpu-0", 600), running("b", "gpu-1", 600)],
        pending=[gone, infer, named],
    )

    def no_engine(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the engine was run forward for pods no node admits")

    monkeypatch.setattr(predict_module, "SimulatedEngine", no_engine)
    got = predict_starts(copy)
    assert {k: p.message for k, p in got.items()} == dict.fromkeys(
        ("default/gone", "default/infer", "default/named"), "no start expected within 7 d"
    )


def test_pods_alike_but_for_a_toleration_are_each_answered_on_their_own() -> None:
    """The pods one run answers without the engine are looked at once per kind (a workload's
    thousand pods alike), the kind taking in all a node's refusal reads: the toleration too."""
    dedicated = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    nodes = [labelled("gpu-0", {"pool": "infer"}, dedicated)]
    refused = [pod(f"infer-{i}", gpus=1, node_selector={"pool": "infer"}) for i in range(3)]
    tolerant = pod(
        "tolerant",
        gpus=1,
        node_selector={"pool": "infer"},
        tolerations=[{"key": "dedicated", "operator": "Exists"}],
    )
    copy = ClusterCopy(
        nodes=nodes, running=[running("a", "gpu-0", 600)], pending=[*refused, tolerant]
    )
    got = predict_starts(copy, horizon_s=86_400)
    assert [got[f"default/infer-{i}"].message for i in range(3)] == [
        "no start expected within 24 h"
    ] * 3
    assert got["default/tolerant"].starts_in_s == pytest.approx(600, abs=15)


def test_only_pods_holding_what_it_asks_are_named_as_never_ending() -> None:
    # The node's agent (a DaemonSet's pod) and a CPU-only sidecar never end either, but a pod
    # waiting for GPUs waits for the GPU pod alone: the message counts that one.
    agent = pod("agent", node="gpu-0")
    agent["metadata"]["ownerReferences"] = [
        {"kind": "DaemonSet", "name": "topos-agent", "controller": True}
    ]
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        running=[
            running("forever", "gpu-0", None),
            RunningCopy(agent, Runtime(None, "unknown")),
            RunningCopy(pod("cache", node="gpu-0"), Runtime(None, "unknown")),
        ],
        pending=[pod("next", gpus=8), pod("web", cpu="500")],
    )
    p = predict_starts(copy, ["default/next", "default/web"], horizon_s=86_400)
    assert p["default/next"].message == (
        "no start expected within 24 h (1 running pod with no expected end)"
    )
    # A pod asking CPU alone may wait for any of them but the DaemonSet's.
    assert p["default/web"].message == (
        "no start expected within 24 h (2 running pods with no expected end)"
    )


def test_a_pod_not_in_the_copy_is_refused_by_name() -> None:
    with pytest.raises(KeyError, match="pod default/ghost is not among the pending pods"):
        predict_start(ClusterCopy(nodes=[node("gpu-0")]), "default/ghost")


# --- runtime sources ---------------------------------------------------------------------------


def started_pod(annotations: dict[str, str] | None = None, owner: str = "") -> dict[str, Any]:
    obj = pod("w", gpus=8, annotations=annotations)
    obj["status"] = {"phase": "Running", "startTime": STARTED}
    if owner:
        obj["metadata"]["ownerReferences"] = [{"kind": "Job", "name": owner, "controller": True}]
    return obj


def test_the_annotation_counts_from_the_pods_start() -> None:
    got = expected_runtime(started_pod({EXPECTED_DURATION: "1h30m"}), now=NOW + 600)
    assert got == Runtime(5400 - 600, "annotation")


def test_the_jobs_deadline_counts_from_the_jobs_start() -> None:
    job = {"spec": {"activeDeadlineSeconds": 7200}, "status": {"startTime": STARTED}}
    assert expected_runtime(started_pod(), now=NOW + 200, job=job) == Runtime(7000, "deadline")


def test_learned_is_the_median_of_earlier_pods_of_the_same_owner_and_shape() -> None:
    history = RuntimeHistory()
    for ran in (100, 1000, 300):
        history.observe(started_pod(owner="sweep"), ran)
    history.observe(started_pod(owner="other"), 5)  # another owner teaches nothing here
    got = expected_runtime(started_pod(owner="sweep"), now=NOW + 50, history=history)
    assert got == Runtime(250, "learned")
    assert expected_runtime(started_pod(owner="new"), now=NOW, history=history).source == (
        "unknown"
    )


def test_past_its_expected_end_a_pod_is_expected_to_end_now() -> None:
    got = expected_runtime(started_pod({EXPECTED_DURATION: "10m"}), now=NOW + 3600)
    assert got == Runtime(0.0, "annotation")


def test_a_malformed_annotation_is_named_and_the_next_source_answers() -> None:
    job = {"spec": {"activeDeadlineSeconds": 60}, "status": {"startTime": STARTED}}
    got = expected_runtime(started_pod({EXPECTED_DURATION: "soon"}), now=NOW, job=job)
    assert got.left_s == 60
    assert got.source == "deadline"
    assert got.note.startswith("topos.io/expected-duration: 'soon': malformed duration 'soon'")


def test_a_pod_ahead_in_the_queue_runs_its_expected_duration_then_frees_its_room() -> None:
    """The urgent pod starts when ``now`` ends, runs its 10 minutes, and ``mine`` starts when it
    ends — named as the pod it waited for, with its source."""
    urgent = pod("urgent", gpus=8, priority=100)
    urgent["spec"]["preemptionPolicy"] = "Never"  # it waits for "now" too
    copy = ClusterCopy(
        nodes=[node("gpu-0")],
        running=[running("now", "gpu-0", 600)],
        pending=[urgent, pod("mine", gpus=8)],
        durations={"default/urgent": Runtime(600, "annotation")},
    )
    p = predict_start(copy, "default/mine")
    assert p.starts_in_s == pytest.approx(1200, abs=30)
    assert p.after == ("default/urgent",)
    assert p.sources == {"default/urgent": "annotation"}


def test_a_pending_pods_duration_is_its_annotation_or_what_was_learned() -> None:
    history = RuntimeHistory()
    owned = pod("etl-1", gpus=8)
    owned["metadata"]["ownerReferences"] = [
        {"kind": "Job", "name": "etl", "uid": "u", "controller": True}
    ]
    assert expected_duration(owned, history=history) == Runtime(None, "unknown")
    history.observe(owned, 300)
    assert expected_duration(owned, history=history) == Runtime(300, "learned")
    owned["metadata"]["annotations"] = {EXPECTED_DURATION: "1h"}
    assert expected_duration(owned, history=history) == Runtime(3600, "annotation")
    owned["metadata"]["annotations"] = {EXPECTED_DURATION: "soon"}
    bad = expected_duration(owned, history=history)
    assert (bad.left_s, bad.source) == (300, "learned")
    assert "topos.io/expected-duration: 'soon'" in bad.note
