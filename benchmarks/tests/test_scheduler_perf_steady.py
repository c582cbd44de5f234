"""scheduler_perf's steady-state ``createPods`` and ``allocResourceClaims`` as
``benchmarks/scheduler_perf.py`` reads and runs them: upstream's
SteadyStateClusterResourceClaimTemplate case read from its YAML, the refusals of bad
parameters, Go durations, upstream's throughput samples, the batch loop against a stand-in API
server, claims allocated as upstream's op allocates them, where a batch's time goes
(``--phases``), and a quick real-plane run where only freed devices let later batches bind, each
pod's claim made, protected and allocated before it is bound."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from benchmarks import scheduler_perf
from benchmarks import scheduler_perf_workload as workload_yaml
from benchmarks.kwok_cluster import parse_limits
from benchmarks.kwok_run import Run
from benchmarks.scheduler_perf_claims import AllocateClaims, plan_allocations
from benchmarks.scheduler_perf_objects import WorkloadError, slice_body
from benchmarks.scheduler_perf_steady import (
    PHASES,
    parse_duration,
    phase_medians,
    steady_state,
    throughput_samples,
)
from common.kube import KubeClient
from common.kube.resources import Resource
from devcluster.binaries import BinariesUnavailable, find

CASE = "SteadyStateClusterResourceClaimTemplate"
DRIVER = "test-driver.cdi.k8s.io"


@pytest.fixture(scope="module")
def dra_dir() -> Path:
    try:
        directory = workload_yaml.module_dir()
    except BinariesUnavailable as exc:
        pytest.skip(f"the k8s.io/kubernetes module is not available: {exc}")
    return directory / workload_yaml.PERF_DIR / "dra"


def test_steady_state_case_is_read_from_upstream_yaml(dra_dir: Path) -> None:
    config = dra_dir / "performance-config.yaml"
    full = workload_yaml.load_workload(config, CASE, "full_500nodes")
    assert full.node_count == 500
    assert full.allocate == (AllocateClaims("init"),)
    assert [(o.resource.kind, o.namespace, o.count) for o in full.objects] == [
        ("DeviceClass", None, 1),
        ("ResourceClaim", "init", 4990),
        ("ResourceClaimTemplate", "test", 1),
    ]
    assert full.steady is not None
    assert (full.steady.count, full.steady.steady_s, full.steady.namespace) == (10, 10.0, "test")
    assert full.dra
    empty = workload_yaml.load_workload(config, CASE, "empty_100nodes", {"initClaims": 0})
    assert empty.objects[1].count == 0
    assert empty.node_count == 100
    # the one-shot DRA case is no steady state
    once = workload_yaml.load_workload(
        config, "SchedulingWithResourceClaimTemplate", "5000pods_500nodes"
    )
    assert once.steady is None
    assert once.allocate == ()


def test_params_of_every_kind_upstream_uses_are_overridden_from_the_command_line(
    dra_dir: Path,
) -> None:
    config = dra_dir / "performance-config.yaml"
    params = workload_yaml.parse_params(["duration=30s", "initClaims=10"])
    assert params == {"duration": "30s", "initClaims": 10}
    longer = workload_yaml.load_workload(config, CASE, "empty_100nodes", params)
    assert longer.steady is not None
    assert longer.steady.steady_s == 30.0  # upstream's 10s, overridden
    assert workload_yaml.parse_params(["steadyState=false"]) == {"steadyState": False}
    for bad in ("duration=soon", "initNodes=1.5", "duration="):
        name, _, value = bad.partition("=")
        with pytest.raises(workload_yaml.WorkloadError, match=f"--param {name}='{value}'"):
            workload_yaml.parse_params([bad])
    # a value of another kind than the workload gives the parameter is named, not coerced
    with pytest.raises(workload_yaml.WorkloadError, match=r"duration=3: .* is a duration, not"):
        workload_yaml.load_workload(config, CASE, "empty_100nodes", {"duration": 3})
    with pytest.raises(workload_yaml.WorkloadError, match=r"initClaims=True: .* is a count"):
        workload_yaml.load_workload(config, CASE, "empty_100nodes", {"initClaims": True})


def _case(tmp_path: Path, ops: str) -> Path:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    (tmp_path / "claim.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c-{{.Index}}}\n"
    )
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: Case\n  workloadTemplate:\n"
        + ops
        + "  workloads:\n  - name: w\n    params: {d: 5s, bad: soon, steady: true, n: 3}\n"
    )
    return config


MEASURED = (
    "  - opcode: createPods\n    count: 1\n    collectMetrics: true\n"
    "    podTemplatePath: pod.yaml\n"
)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            MEASURED + "    steadyState: true\n",
            r"\[0\]\.duration: None is not a duration",
        ),
        (
            MEASURED + "    steadyState: true\n    durationParam: $bad\n",
            r"\[0\]\.duration: 'soon' is not a duration",
        ),
        (
            MEASURED + "    steadyState: true\n    durationParam: $later\n",
            r"\[0\]\.durationParam: '\$later' is not a parameter of this workload",
        ),
        (
            MEASURED + "    steadyState: true\n    duration: 0s\n",
            r"\[0\]\.duration: 0 s: a steady state needs more than 0",
        ),
        (
            MEASURED + "    steadyState: yes please\n    duration: 1s\n",
            r"\[0\]\.steadyState: 'yes please' is not true or false",
        ),
        (
            "  - opcode: createPods\n    count: 1\n    steadyState: true\n    duration: 1s\n"
            "    podTemplatePath: pod.yaml\n" + MEASURED,
            r"\[0\]\.steadyState: read only with collectMetrics: true",
        ),
        (
            MEASURED + "    podsPerSecond: 5\n",
            r"\[0\]\.podsPerSecond: not read by this runner \(createPods\)",
        ),
        (
            "  - opcode: allocResourceClaims\n" + MEASURED,
            r"\[0\]\.namespace: None is not a namespace",
        ),
        (
            "  - opcode: allocResourceClaims\n    namespace: init\n    nodes: all\n" + MEASURED,
            r"\[0\]\.nodes: not read by this runner \(allocResourceClaims\)",
        ),
        (
            "  - opcode: allocResourceClaims\n    namespace: init\n"
            "  - opcode: createAny\n    templatePath: claim.yaml\n    namespace: init\n"
            "    countParam: $n\n" + MEASURED,
            r"\[1\]: ResourceClaims created in 'init' after its allocResourceClaims",
        ),
    ],
)
def test_bad_steady_state_and_allocation_ops_are_named(
    tmp_path: Path, ops: str, message: str
) -> None:
    with pytest.raises(WorkloadError, match=message):
        workload_yaml.load_workload(_case(tmp_path, ops), "Case", "w")


def test_steady_state_from_parameters(tmp_path: Path) -> None:
    ops = MEASURED + "    steadyStateParam: $steady\n    durationParam: $d\n"
    work = workload_yaml.load_workload(_case(tmp_path, ops), "Case", "w")
    assert work.steady is not None
    assert work.steady.steady_s == 5.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("250ms", 0.25), ("0", 0.0), ("-2s", -2.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10", "s", "", "1x", 10, None, "1s 2s"])
def test_not_go_durations_are_named(text: object) -> None:
    with pytest.raises(WorkloadError, match=r"^where: .* is not a duration"):
        parse_duration(text, "where")


def test_throughput_is_sampled_as_upstream_samples_it() -> None:
    # Binds at 0.5 s (before the first tick, which starts the series and is no sample), then
    # 3 by 2 s, none in (2, 3], 4 by 4 s: samples 3/1, then 4/2 twice (the empty tick repeats
    # the next), and one after the window's end (5 s) that is not counted.
    binds = [0.5, 1.2, 1.5, 1.9, 3.2, 3.4, 3.6, 3.9, 5.5]
    assert throughput_samples(binds, 0.0, 5.0) == [3.0, 2.0, 2.0]
    assert throughput_samples([], 0.0, 5.0) == []
    assert throughput_samples([0.1, 0.2], 0.0, 5.0) == []  # all before the first tick


def test_a_batch_s_steps_are_the_medians_over_pods_seen_through_every_one() -> None:
    sent = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    at = {"a": 0.010, "b": 0.030, "c": 0.020}  # d's claim never seen: left out
    phases = {p: {n: sent[n] + (i + 1) * dt for n, dt in at.items()} for i, p in enumerate(PHASES)}
    bound = {n: sent[n] + 5 * dt for n, dt in at.items()} | {"d": 4.5}
    steps = phase_medians(sent, phases, bound)
    assert [label for label, _ in steps] == [*PHASES, "bound"]
    assert [round(ms) for _, ms in steps] == [20, 40, 60, 80, 100]
    assert phase_medians(sent, {**phases, "allocated": {}}, bound) == []


class _Plane:
    """Stands in for the API server and a scheduler: a created pod is bound at once (a watch
    event), except in batches after ``bind_batches``; records the calls."""

    def __init__(self, bind_batches: int) -> None:
        self.bind_batches = bind_batches
        self.calls: list[str] = []
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.deletes = 0

    async def list(self, resource: Resource, **_: Any) -> dict[str, Any]:
        return {"items": [], "metadata": {}, "resourceVersion": "1"}

    async def watch(self, resource: Resource, **_: Any) -> AsyncIterator[tuple[str, Any]]:
        while True:
            yield await self.events.get()

    async def create(
        self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        self.calls.append(f"create {body['metadata']['name']} in {namespace}")
        if self.deletes < self.bind_batches:
            bound = {**body, "spec": {**body["spec"], "nodeName": "n"}}
            await self.events.put(("MODIFIED", bound))
        return body

    async def delete_collection(self, resource: Resource, **kw: Any) -> dict[str, Any]:
        self.calls.append(f"delete pods of {kw['namespace']} grace {kw['grace_period_seconds']}")
        self.deletes += 1
        return {}


def test_steady_state_creates_the_next_batch_when_the_last_is_bound() -> None:
    plane = _Plane(bind_batches=2)
    run = Run("topos", parse_limits("unlimited")[0], 2)

    def body(i: int) -> dict[str, Any]:
        return {"metadata": {"name": f"p-{i}"}, "spec": {"schedulerName": "topos"}}

    async def go() -> tuple[float, float]:
        return await steady_state(cast(KubeClient, plane), "test", body, 2, 0.3, run)

    start, end = asyncio.run(go())
    assert end - start == pytest.approx(0.3)
    assert plane.calls == [
        "create p-0 in test",
        "create p-1 in test",
        "delete pods of test grace 0",
        "create p-2 in test",
        "create p-3 in test",
        "delete pods of test grace 0",
        "create p-4 in test",  # never bound: the op waits for it until its time is up
        "create p-5 in test",
    ]
    assert sorted(run.bound) == ["p-0", "p-1", "p-2", "p-3"]
    assert sorted(run.sent) == [f"p-{i}" for i in range(6)]
    assert all(start <= run.sent[n] <= run.bound[n] <= end for n in run.bound)


def _claim(i: int, namespace: str = "init", node: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": f"c-{i}", "namespace": namespace, "uid": f"u{i}"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "k"}}]}},
    }
    obj["metadata"]["resourceVersion"] = "7"
    if node:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        result = {"request": "r", "driver": DRIVER, "pool": node, "device": "instance-0"}
        obj["status"] = {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [term]},
            }
        }
    return obj


def _objects(nodes: int, devices: int) -> tuple[list[Any], list[Any], list[Any]]:
    names = [f"n-{i}" for i in range(nodes)]
    node_objs = [{"metadata": {"name": n, "labels": {"node-with-dra": "true"}}} for n in names]
    slices = [slice_body(DRIVER, n, devices) for n in names]
    cel = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    classes = [{"metadata": {"name": "k"}, "spec": {"selectors": [cel]}}]
    return node_objs, slices, classes


def test_claims_are_allocated_one_device_each_on_random_nodes_until_full() -> None:
    nodes, slices, classes = _objects(nodes=4, devices=3)
    # one device taken already, by a claim in another namespace; one claim allocated already
    claims = [_claim(0, "other", node="n-2"), _claim(1, node="n-0")]
    claims += [_claim(i) for i in range(2, 12)]  # ten more: 12 devices, 2 taken
    bodies = plan_allocations("init", nodes, slices, classes, claims, random.Random(3))
    assert [b["metadata"]["name"] for b in bodies] == [f"c-{i}" for i in range(2, 12)]
    results = [b["status"]["allocation"]["devices"]["results"] for b in bodies]
    assert all(len(r) == 1 and r[0]["request"] == "r" and r[0]["driver"] == DRIVER for r in results)
    taken = [(r[0]["pool"], r[0]["device"]) for r in results]
    assert len(set(taken)) == 10
    assert ("n-2", "instance-0") not in taken
    assert ("n-0", "instance-0") not in taken
    for body, result in zip(bodies, results, strict=True):  # the node of the device chosen
        term = body["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
        assert term["matchFields"][0]["values"] == [result[0]["pool"]]
        assert "reservedFor" not in body["status"]  # allocated, in use by no pod
    assert body["metadata"]["resourceVersion"] == "7"  # written against the version read
    assert Counter(p for p, _ in taken) == {"n-0": 2, "n-1": 3, "n-2": 2, "n-3": 3}
    # random nodes, not first fit over nodes: another draw takes others first
    again = plan_allocations("init", nodes, slices, classes, claims, random.Random(4))
    assert [b["status"] for b in again] != [b["status"] for b in bodies]
    # one claim too many fits no node, and says so
    with pytest.raises(WorkloadError, match=r"allocResourceClaims init: claim c-12 fits no node"):
        plan_allocations("init", nodes, slices, classes, [*claims, _claim(12)], random.Random(3))


def test_quick_steady_state_run_frees_and_reuses_devices(dra_dir: Path) -> None:
    found = find(extra=True)
    if found is None or found.kwok is None or found.kube_scheduler is None:
        pytest.skip("kwok / kube-scheduler not built (python -m devcluster.binaries ensure --all)")
    if found.kube_controller_manager is None:
        pytest.skip("kube-controller-manager not built (its resourceclaim controller is needed)")
    # upstream's case at 4 nodes of 2 devices, 6 of the 8 allocated first: each batch of 2 pods
    # binds only on the devices the batch before it left, once its claims are deallocated
    workload = workload_yaml.load_workload(
        dra_dir / "performance-config.yaml",
        CASE,
        "full_100nodes",
        {"nodesWithDRA": 4, "maxClaimsPerNode": 2, "initClaims": 6},
    )
    step = workload.steady
    assert step is not None
    small = workload_yaml.Workload(
        workload.case,
        workload.name,
        workload.nodes,
        (workload_yaml.Step(step.template, 2, True, step.namespace, steady_s=4.0),),
        drivers=workload.drivers,
        objects=workload.objects,
        allocate=workload.allocate,
    )
    runs = asyncio.run(
        scheduler_perf.bench(
            small,
            limit=parse_limits("unlimited")[0],
            order=["kube-scheduler", "topos"],
            timeout_s=120,
            phases=True,
        )
    )
    assert [r.scheduler for r in runs] == ["kube-scheduler", "topos"]
    for run in runs:
        assert not run.timed_out
        assert len(run.bound) >= 4, run.summary()  # a second batch bound on freed devices
        assert run.rate > 0
        assert run.samples
        assert run.requests["DELETECOLLECTION", "pods", ""] == 0  # the benchmark's, not counted
        # each pod's claim is made, named in it, protected, allocated, then the pod bound (the
        # claim's steps come on one watch, in order; the bind is sent once it is allocated)
        steps = dict(scheduler_perf.phase_medians(run.sent, run.phases or {}, run.bound))
        assert list(steps) == [*PHASES, "bound"], run.summary()
        times = [steps[p] for p in ("claim made", "protected", "allocated", "bound")]
        assert times == sorted(times), run.summary()
        assert "a pod's steps, ms after its create (p50): claim made" in run.summary()
