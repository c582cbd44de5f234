"""scheduler_perf's ordering ops as ``benchmarks/scheduler_perf.py`` reads them from upstream's
YAML — ``createPodSets`` (and namespace templates), ``barrier``, ``skipWaitToCompletion``,
``deletePods``, ``startCollectingMetrics``/``stopCollectingMetrics``, ``updateAny`` — their
Nodes made in each turn (``createNodes`` after a pod or metrics op), their refusals of bad
parameters, the book of pods a barrier counts, and quick runs of the gated, finalizer, pod-add and
node-update cases: both schedulers bind every measured pod."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from benchmarks import scheduler_perf
from benchmarks import scheduler_perf_workload as workload_yaml
from benchmarks.kwok_cluster import parse_limits
from benchmarks.scheduler_perf_objects import WorkloadError
from benchmarks.scheduler_perf_sequence import (
    ATTEMPTED,
    Barrier,
    DeletePods,
    PodBook,
    StartMetrics,
    StopMetrics,
    delete_pods,
)
from common.kube import KubeClient
from devcluster.binaries import find


def test_pod_sets_unroll_into_a_step_per_labelled_namespace(perf_dir: Path) -> None:
    work = workload_yaml.load_workload(
        perf_dir / "affinity" / "performance-config.yaml",
        "SchedulingRequiredPodAntiAffinityWithNSSelector",
        "500Nodes",
    )
    assert [(s.count, s.measured, s.namespace) for s in work.pods] == [
        *((4, False, f"init-ns-{n}") for n in range(10)),
        (100, True, "measure-ns-0"),
    ]
    assert work.namespaces == (*(f"init-ns-{n}" for n in range(10)), "measure-ns-0")
    # namespace-with-labels.yaml: what the pods' namespaceSelector matches
    assert dict(work.namespace_labels) == {n: {"team": "devops"} for n in work.namespaces}
    spaces = scheduler_perf.namespaces_of(work, "perf-topos-1")
    assert spaces["init-ns-3"] == "init-ns-3"
    assert spaces[scheduler_perf.MEASURED_SPACE] == "measure-ns-0"


def test_nodes_made_after_pod_or_metrics_ops_are_made_in_each_turn(perf_dir: Path) -> None:
    config = perf_dir / "event_handling" / "performance-config.yaml"
    work = workload_yaml.load_workload(config, "EventHandlingNodeAdd", "2Nodes_20Pods")
    assert work.node_count == 0  # its first createNodes follows startCollectingMetrics
    made = [(t.first, t.step.count) for t in work.turn_nodes]
    assert made == [(0, 1), (1, 1), (2, 2), (4, 2), (6, 2)]  # named one after the other
    order = [type(i).__name__ for i in work.in_order()]
    assert order[:5] == ["StartMetrics", "TurnNodes", "Step", "Barrier", "TurnNodes"]
    # before any pod or metrics op: made once, kept for every turn
    work = workload_yaml.load_workload(config, "EventHandlingPodAdd", "10Pods")
    assert (work.node_count, work.turn_nodes) == (2, ())


def test_update_bodies_keep_what_the_runner_gave_the_object() -> None:
    node = {"kind": "Node", "metadata": {"name": "node-1"}, "spec": {"unschedulable": False}}
    node["status"] = {"capacity": {"cpu": "4"}}
    dressed = scheduler_perf._dressed(node, "topos")
    # KWOK keeps managing it (its annotation and labels), the update's spec and status are kept
    assert dressed["metadata"]["annotations"][scheduler_perf.KWOK_ANNOTATION] == "fake"
    assert dressed["metadata"]["labels"]["type"] == "kwok"
    assert (dressed["spec"], dressed["status"]) == (node["spec"], node["status"])
    pod = {"kind": "Pod", "metadata": {"name": "p-0"}, "spec": {"containers": []}}
    assert scheduler_perf._dressed(pod, "topos")["spec"]["schedulerName"] == "topos"
    cm = {"kind": "ConfigMap", "metadata": {"name": "c"}}
    assert scheduler_perf._dressed(cm, "topos") is cm
    # a template's own pod name is kept (its updateAny names it); else the runner's
    named = {"metadata": {"name": "pod-a-3", "generateName": "x-"}, "spec": {}}
    assert scheduler_perf.pod_body(named, "init-00003", "topos")["metadata"]["name"] == "pod-a-3"
    unnamed = {"metadata": {"generateName": "x-"}, "spec": {}}
    assert scheduler_perf.pod_body(unnamed, "init-00003", "topos")["metadata"]["name"] == (
        "init-00003"
    )


def test_gated_case_reads_its_barrier_and_deletions_in_order(perf_dir: Path) -> None:
    work = workload_yaml.load_workload(
        perf_dir / "misc" / "performance-config.yaml", "SchedulingWhileGated", "1Node_10GatedPods"
    )
    order = work.in_order()
    assert [type(i).__name__ for i in order] == [
        "Step",
        "Barrier",
        "Step",
        "DeletePods",
        "Step",
    ]
    gated, barrier, deleting, delete, measured = order
    assert isinstance(gated, workload_yaml.Step)
    assert gated.skip_wait
    assert gated.alias == "namespace-1"  # upstream's name: the op's index
    assert barrier == Barrier((), (), ATTEMPTED)
    assert isinstance(deleting, workload_yaml.Step)
    assert not deleting.skip_wait
    assert delete == DeletePods("namespace-3", (), 50, skip_wait=True)
    assert isinstance(measured, workload_yaml.Step)
    assert measured.measured
    assert work.measured_pods == 10
    spaces = scheduler_perf.namespaces_of(work, "perf-topos-1")
    # each of the run's own: the deletions reach only the pods made to be deleted
    assert spaces["namespace-1"] == "perf-topos-1-namespace-1"
    assert spaces["namespace-3"] == "perf-topos-1-namespace-3"
    assert spaces[scheduler_perf.MEASURED_SPACE] == "perf-topos-1"


def test_metrics_window_counts_the_pods_it_selects(perf_dir: Path) -> None:
    work = workload_yaml.load_workload(
        perf_dir / "event_handling" / "performance-config.yaml", "EventHandlingPodAdd", "1000Pods"
    )
    assert work.window == StartMetrics(
        "unschedPods", ("podtopologyspread", "interpodaffinity"), (("type", "unsched"),)
    )
    assert isinstance(work.in_order()[-1], StopMetrics)
    # the two skipWaitToCompletion steps labelled type: unsched, not the pods unblocking them
    assert work.measured_pods == 2000
    assert work.node_count == 2


def _case(tmp_path: Path, ops: str) -> Path:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: Case\n  defaultPodTemplatePath: pod.yaml\n  workloadTemplate:\n"
        + ops
        + "  workloads:\n  - name: w\n    params: {n: 2}\n"
    )
    return config


MEASURED = "  - opcode: createPods\n    count: 1\n    collectMetrics: true\n"
GATED = "  - opcode: createPods\n    count: 2\n    skipWaitToCompletion: true\n"


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            GATED + "  - opcode: barrier\n    stageRequirement: Sometimes\n" + MEASURED,
            r"\[1\]\.stageRequirement: 'Sometimes' is not Scheduled or Attempted",
        ),
        (
            GATED + "  - opcode: barrier\n    namespaces: [elsewhere]\n" + MEASURED,
            r"Barrier names namespace 'elsewhere', which no op before it made \(namespace-0\)",
        ),
        (
            GATED + "  - opcode: barrier\n    labelSelector: [type]\n" + MEASURED,
            r"\[1\]\.labelSelector: \['type'\] is not a map of label to value",
        ),
        (
            GATED + "  - opcode: deletePods\n    namespace: namespace-0\n"
            "    deletePodsPerSecond: -1\n" + MEASURED,
            r"\[1\]\.deletePodsPerSecond: -1 is not an integer ≥ 0",
        ),
        (
            GATED + "  - opcode: deletePods\n    namespace: namespace-0\n    grace: 0\n" + MEASURED,
            r"\[1\]\.grace: not read by this runner \(deletePods\)",
        ),
        (
            GATED + "  - opcode: deletePods\n" + MEASURED,
            r"\[1\]\.namespace: None is not a namespace",
        ),
        (
            "  - opcode: createPods\n    count: 1\n    collectMetrics: true\n"
            "    skipWaitToCompletion: true\n",
            r"\[0\]\.skipWaitToCompletion: true with collectMetrics: true",
        ),
        (
            "  - opcode: createPods\n    count: 1\n    skipWaitToCompletion: 'yes'\n" + MEASURED,
            r"\[0\]\.skipWaitToCompletion: 'yes' is not true or false",
        ),
        (
            "  - opcode: createPodSets\n    countParam: $n\n    createPodsOp:\n"
            "      opcode: createPods\n      count: 1\n" + MEASURED,
            r"\[0\]\.namespacePrefix: None is not a namespace prefix",
        ),
        (
            "  - opcode: createPodSets\n    count: 2\n    namespacePrefix: p\n"
            "    createPodsOp:\n      opcode: churn\n" + MEASURED,
            r"\[0\]\.createPodsOp: \{'opcode': 'churn'\} is not a createPods op",
        ),
        (
            "  - opcode: createNamespaces\n    prefix: p\n    count: 1\n"
            "    namespaceTemplatePath: ns.yaml\n" + MEASURED,
            r"\[0\]\.namespaceTemplatePath: ns.yaml is a 'Pod', not a Namespace",
        ),
        (
            "  - opcode: stopCollectingMetrics\n" + GATED,
            r"0 startCollectingMetrics and 1 stopCollectingMetrics",
        ),
        (
            "  - opcode: startCollectingMetrics\n    namespaces: []\n" + GATED,
            r"\[0\]\.namespaces: \[\]: give at least one",
        ),
        (
            "  - opcode: startCollectingMetrics\n    namespaces: [a]\n"
            "  - opcode: stopCollectingMetrics\n" + MEASURED,
            r"collectMetrics on a createPods op and startCollectingMetrics",
        ),
        (
            "  - opcode: updateAny\n    templatePath: cm.yaml\n" + MEASURED,
            r"\[0\]\.namespace: None, but ConfigMap is namespaced",
        ),
        (
            "  - opcode: updateAny\n    templatePath: cm.yaml\n    namespace: a\n"
            "    subresources: [resize, status]\n" + MEASURED,
            r"\[0\]\.subresources: \['resize', 'status'\]: this runner reads one",
        ),
        (
            MEASURED + "  - opcode: createNodes\n    count: 1\n    nodeTemplatePath: cm.yaml\n"
            "    nodeAllocatableStrategy:\n"
            "      nodeAllocatable: {attachable-volumes-csi-ebs.csi.aws.com: '39'}\n"
            "      csiNodeAllocatable: {ebs.csi.aws.com: {count: 39}}\n",
            r"\[1\]\.nodeAllocatableStrategy: not read on a createNodes op after a pod",
        ),
    ],
)
def test_bad_ordering_ops_are_named(tmp_path: Path, ops: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        workload_yaml.load_workload(_case(tmp_path, ops), "Case", "w")


def _pod(
    name: str,
    namespace: str = "a",
    *,
    node: str = "",
    attempted: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False"}] if attempted else []
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions},
    }


class _Kube:
    """One list of pods, then a watch fed from a queue; deletes recorded."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.calls: list[str] = []

    async def list(self, resource: object, **kw: Any) -> dict[str, Any]:
        self.calls.append(f"list {kw.get('namespace')} {kw.get('label_selector')}")
        return {"items": self.pods, "metadata": {}, "resourceVersion": "1"}

    async def watch(self, resource: object, **kw: Any) -> AsyncIterator[tuple[str, Any]]:
        while True:
            yield await self.events.get()

    async def delete(self, resource: object, name: str, **kw: Any) -> dict[str, Any]:
        self.calls.append(f"delete {name}")
        return {}

    async def delete_collection(self, resource: object, **kw: Any) -> dict[str, Any]:
        self.calls.append(f"delete-collection {kw.get('namespace')} {kw.get('label_selector')}")
        return {}


def test_the_book_counts_bound_and_tried_pods_and_a_barrier_waits_for_them() -> None:
    async def go() -> tuple[list[int], dict[str, float], str]:
        kube = _Kube(
            [
                _pod("bound", node="n", labels={"type": "unsched"}),
                _pod("tried", attempted=True, labels={"type": "unsched"}),
                _pod("new", labels={"type": "unsched"}),
                _pod("blocker", node="n", labels={"type": "blocker"}),
                _pod("elsewhere", "b", node="n"),
            ]
        )
        book = PodBook(cast(KubeClient, kube))
        await book.start()
        unsched = (("type", "unsched"),)
        counts = [
            book.count("a"),
            book.count("a", unsched),
            book.count("a", unsched, ATTEMPTED),
        ]
        bound: dict[str, float] = {}
        book.record(bound, frozenset({"a"}), unsched)
        waiting = asyncio.create_task(book.wait("a", 3, selector=unsched, timeout_s=5))
        await asyncio.sleep(0)
        assert not waiting.done()
        kube.events.put_nowait(("MODIFIED", _pod("tried", node="n", labels={"type": "unsched"})))
        kube.events.put_nowait(("MODIFIED", _pod("new", node="m", labels={"type": "unsched"})))
        await waiting
        kube.events.put_nowait(("DELETED", _pod("bound", node="n", labels={"type": "unsched"})))
        await asyncio.sleep(0.01)
        counts.append(book.count("a", unsched))
        with pytest.raises(RuntimeError) as missing:
            await book.wait("a", 3, selector=unsched, timeout_s=0.05)
        await book.stop()
        return counts, bound, str(missing.value)

    counts, bound, missing = asyncio.run(go())
    assert counts == [2, 1, 2, 2]  # everything bound in a; unsched bound; unsched bound or tried
    assert sorted(bound) == ["new", "tried"]  # seen bound after the recording began
    assert missing == "a: 2 of 3 pods scheduled (type=unsched) in 0.05 s"


def test_pods_are_deleted_at_once_or_at_the_rate_given() -> None:
    async def go(op: DeletePods) -> tuple[list[str], Counter[tuple[str, str, str]], float]:
        kube = _Kube([_pod(f"p-{i}", labels={"type": "blocker"}) for i in range(4)])
        own: Counter[tuple[str, str, str]] = Counter()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await delete_pods(cast(KubeClient, kube), op, "ns-1", own)
        return kube.calls, own, loop.time() - t0

    calls, own, _ = asyncio.run(go(DeletePods("namespace-3", (("type", "blocker"),))))
    assert calls == ["delete-collection ns-1 type=blocker"]
    assert own == Counter({("DELETECOLLECTION", "pods", ""): 1})
    calls, own, took = asyncio.run(go(DeletePods("namespace-3", (), per_second=100)))
    assert calls == ["list ns-1 None", "delete p-0", "delete p-1", "delete p-2", "delete p-3"]
    assert took >= 0.04 - 1e-3  # four at 100 a second
    assert own == Counter({("LIST", "pods", ""): 1})


def _quick(perf_dir: Path, config: str, case: str, workload: str) -> list[scheduler_perf.PerfRun]:
    found = find(extra=True)
    if found is None or found.kwok is None or found.kube_scheduler is None:
        pytest.skip("kwok / kube-scheduler not built (python -m devcluster.binaries ensure --all)")
    work = workload_yaml.load_workload(perf_dir / config, case, workload)
    return asyncio.run(
        scheduler_perf.bench(
            work,
            limit=parse_limits("unlimited")[0],
            order=["kube-scheduler", "topos"],
            timeout_s=120,
        )
    )


@pytest.mark.parametrize(
    ("config", "case", "workload", "measured"),
    [
        ("misc/performance-config.yaml", "SchedulingWhileGated", "1Node_10GatedPods", 10),
        (
            "misc/performance-config.yaml",
            "SchedulingDeletedPodsWithFinalizers",
            "10Node_100DeletingPods",
            10,
        ),
        ("event_handling/performance-config.yaml", "EventHandlingPodAdd", "10Pods", 20),
        # Nodes made (and updated) in each turn, none before: a scratch Node for the warm-ups
        ("event_handling/performance-config.yaml", "EventHandlingNodeUpdate", "2Nodes_20Pods", 120),
    ],
)
def test_quick_ordered_runs_bind_every_measured_pod(
    perf_dir: Path, config: str, case: str, workload: str, measured: int
) -> None:
    runs = _quick(perf_dir, config, case, workload)
    assert [r.scheduler for r in runs] == ["kube-scheduler", "topos"]
    for run in runs:
        assert not run.timed_out
        assert (run.pods, len(run.bound)) == (measured, measured), run.summary()
        assert run.rate > 0
        # the namespaces the workload names serve both turns: only this turn's Events count
        assert run.scheduled_events <= measured
