"""scheduler_perf's workloads on KWOK: upstream's own workload YAML, Topos beside kube-scheduler
in one run on one control plane.

Kubernetes measures its scheduler with the test cases under
``test/integration/scheduler_perf/`` (``<area>/performance-config.yaml``: opcodes over node and
pod templates, counts as parameters per named workload). This runner reads that YAML from the
``k8s.io/kubernetes`` Go module of the control plane's version (``go mod download``; nothing is
copied into the repository), takes one test case and workload (``SchedulingBasic`` /
``500Nodes`` by default), creates its Nodes with the node template (KWOK makes them Ready and
runs their pods), then for each scheduler in turn — kube-scheduler of the same version for
``schedulerName: default-scheduler``, ``topos coordinator`` for ``topos`` (both as
``benchmarks/kwok_cluster.py`` starts them, client QPS/burst ``--limit``) — creates the
``createPods`` steps' pods from their templates: the unmeasured ones first (all bound before
going on), then the ``collectMetrics`` ones, measured as ``benchmarks/kwok_run.py`` measures:
pods bound per second from the first create sent to the last bind seen on a watch, create→bound
latency p50/p99, scheduler CPU per pod, API requests per pod, RSS. The pods are deleted before
the next scheduler's turn; the Nodes stay.

The opcodes read: ``createNodes`` (with ``labelNodePrepareStrategy``: its label on the nodes,
values round robin, as upstream's ``LabelNodePrepareStrategy``), ``createNamespaces``
(``prefix-0``, ``prefix-1``, …), ``createPods`` (with its ``namespace``: the affinity templates
name ``sched-0`` and ``sched-1``; without one, a namespace of the run's) and ``churn`` in
``create`` mode (its templates' pods created every ``intervalMilliseconds`` while the measured
pods are, up to ``number``; upstream's Unschedulable case). Another opcode, a templated
(``{{…}}``) file or a missing parameter is an error naming it. ``--param name=value`` overrides a
workload's parameter (to run a case at a size upstream gives it no workload for; say so).

    .venv/bin/python -m benchmarks.scheduler_perf [--case SchedulingBasic] [--workload 500Nodes]
        [--config misc/performance-config.yaml] [--limit unlimited] [--order kube-scheduler,topos]
        [--param initNodes=500 ...] [--profile DIR] [--json]

``--profile DIR`` records the coordinator with ``py-spy`` during its measured phase only
(``DIR/topos-<tag>.txt``, raw collapsed stacks).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from benchmarks.apiserver_metrics import requests_total, scheduler_share
from benchmarks.kwok_cluster import (
    APISERVER_ARGS,
    KWOK_ANNOTATION,
    Limit,
    Process,
    compile_topos,
    parse_limits,
    start_kube_scheduler,
    start_kwok,
    start_profiler,
    start_topos,
    wait_ready,
)
from benchmarks.kwok_run import Run, cpu_seconds
from benchmarks.kwok_settle import clear
from benchmarks.kwok_throughput import watch
from common.kube import NAMESPACES, NODES, PODS, KubeClient
from common.kube.errors import AlreadyExists
from devcluster.binaries import (
    KUBERNETES_VERSION,
    _go,
    _go_env,
    _module_download,
    ensure,
)
from devcluster.controlplane import ControlPlane, ControlPlaneSettings

SCHEDULERS = {"kube-scheduler": "default-scheduler", "topos": "topos"}
#: As upstream's scheduler_perf API server (its util.go): the Priority admission plugin is off, so
#: the templates' ``spec.priority`` (PreemptionBasic, Unschedulable) is taken as written.
PERF_APISERVER_ARGS = (*APISERVER_ARGS, "--disable-admission-plugins=Priority")
PERF_DIR = "test/integration/scheduler_perf"
CREATORS = 32


class WorkloadError(ValueError):
    """The workload YAML asks for something this runner does not read; the message names it."""


@dataclass(frozen=True, slots=True)
class Step:
    template: dict[str, Any]
    count: int
    measured: bool = False
    namespace: str | None = None  # createPods' own (else one of the run's)
    label: tuple[str, tuple[str, ...]] | None = None  # createNodes: key, values round robin


@dataclass(frozen=True, slots=True)
class Churn:
    """A ``churn`` op in ``create`` mode: its templates' pods, one of each every ``interval_s``,
    at most ``number`` (0: no limit) — while the measured pods are created and bound."""

    templates: tuple[dict[str, Any], ...]
    interval_s: float
    number: int = 0
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    case: str
    name: str
    nodes: tuple[Step, ...]
    pods: tuple[Step, ...]
    namespaces: tuple[str, ...] = ()  # createNamespaces'
    churn: tuple[Churn, ...] = ()

    @property
    def node_count(self) -> int:
        return sum(s.count for s in self.nodes)

    @property
    def measured_pods(self) -> int:
        return sum(s.count for s in self.pods if s.measured)


def module_dir() -> Path:
    """The ``k8s.io/kubernetes`` module of the control plane's version (downloaded if needed)."""
    with tempfile.TemporaryDirectory() as scratch:
        info = _module_download(
            _go(), f"k8s.io/kubernetes@v{KUBERNETES_VERSION}", cwd=Path(scratch), env=_go_env()
        )
    return Path(info["Dir"])


def _template(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise WorkloadError(f"{path}: no such template")
    text = path.read_text()
    if "{{" in text:
        raise WorkloadError(f"{path}: a templated file ({{{{…}}}}) is not read by this runner")
    loaded = yaml.safe_load(text)
    if not isinstance(loaded, dict):
        raise WorkloadError(f"{path}: expected one object")
    return loaded


def _count(op: Mapping[str, Any], params: Mapping[str, Any], where: str) -> int:
    if "count" in op:
        return int(op["count"])
    param = str(op.get("countParam", ""))
    if not param.startswith("$") or param[1:] not in params:
        raise WorkloadError(f"{where}.countParam: {param!r} is not a parameter of this workload")
    return int(params[param[1:]])


def load_workload(
    config: Path, case: str, workload: str, overrides: Mapping[str, int] | None = None
) -> Workload:
    """One workload of one test case of a scheduler_perf ``performance-config.yaml``;
    ``overrides``: parameters replaced (or added)."""
    cases = yaml.safe_load(config.read_text()) or []
    found = next((c for c in cases if c.get("name") == case), None)
    if found is None:
        known = ", ".join(str(c.get("name")) for c in cases)
        raise WorkloadError(f"test case {case!r} is not in {config} (it has: {known})")
    chosen = next((w for w in found.get("workloads") or () if w.get("name") == workload), None)
    if chosen is None:
        known = ", ".join(str(w.get("name")) for w in found.get("workloads") or ())
        raise WorkloadError(f"{case}: no workload {workload!r} (it has: {known})")
    params = {**(chosen.get("params") or {}), **(overrides or {})}
    base = config.parent
    default_pod = found.get("defaultPodTemplatePath")
    nodes: list[Step] = []
    pods: list[Step] = []
    namespaces: list[str] = []
    churn: list[Churn] = []
    for i, op in enumerate(found.get("workloadTemplate") or ()):
        where = f"{case}.workloadTemplate[{i}]"
        opcode = op.get("opcode")
        if opcode == "createNodes":
            count = _count(op, params, where)
            path = op.get("nodeTemplatePath") or "../templates/node-default.yaml"
            nodes.append(Step(_template(base / path), count, label=_label(op, where)))
        elif opcode == "createNamespaces":
            prefix = op.get("prefix")
            if not isinstance(prefix, str) or not prefix:
                raise WorkloadError(f"{where}.prefix: {prefix!r} is not a namespace prefix")
            namespaces += [f"{prefix}-{n}" for n in range(_count(op, params, where))]
        elif opcode == "createPods":
            # Neither: upstream's makeBasePod (testutils.MakePodSpec), which pod-default.yaml is.
            path = op.get("podTemplatePath") or default_pod or "../templates/pod-default.yaml"
            count = _count(op, params, where)
            measured = bool(op.get("collectMetrics"))
            ns = op.get("namespace")
            pods.append(Step(_template(base / path), count, measured, namespace=ns))
        elif opcode == "churn":
            if op.get("mode") != "create":
                raise WorkloadError(f"{where}.mode: {op.get('mode')!r} is not read (only create)")
            paths = op.get("templatePaths") or []
            if not paths:
                raise WorkloadError(f"{where}.templatePaths: none given")
            templates = tuple(_template(base / p) for p in paths)
            if any(t.get("kind") != "Pod" for t in templates):
                raise WorkloadError(f"{where}.templatePaths: only Pod templates are read")
            interval = float(op.get("intervalMilliseconds", 500)) / 1000
            number = int(op.get("number", 0))
            churn.append(Churn(templates, interval, number, op.get("namespace")))
        else:
            raise WorkloadError(f"{where}.opcode: {opcode!r} is not read by this runner")
    measured_in = {s.namespace for s in pods if s.measured}
    if not measured_in:
        raise WorkloadError(f"{case}/{workload}: no createPods step with collectMetrics")
    if len(measured_in) > 1:
        raise WorkloadError(f"{case}/{workload}: measured pods in several namespaces")
    return Workload(case, workload, tuple(nodes), tuple(pods), tuple(namespaces), tuple(churn))


def _label(op: Mapping[str, Any], where: str) -> tuple[str, tuple[str, ...]] | None:
    strategy = op.get("labelNodePrepareStrategy")
    if strategy is None:
        return None
    key, values = strategy.get("labelKey"), strategy.get("labelValues") or []
    if not isinstance(key, str) or not key or not values:
        raise WorkloadError(f"{where}.labelNodePrepareStrategy: needs labelKey and labelValues")
    if any(k != "labelKey" and k != "labelValues" for k in strategy):
        raise WorkloadError(f"{where}.labelNodePrepareStrategy: only labelKey/labelValues read")
    return key, tuple(str(v) for v in values)


def parse_params(items: Sequence[str]) -> dict[str, int]:
    """``name=value`` pairs (``--param``) as workload parameters."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.isdigit():
            raise WorkloadError(f"--param {item!r}: expected name=count, e.g. initNodes=500")
        out[name] = int(value)
    return out


def node_body(
    template: Mapping[str, Any], index: int, label: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Node (named, handed to KWOK) and the status to write, from the node template;
    ``label``: what the step's labelNodePrepareStrategy gives it."""
    name = f"perf-node-{index:05d}"
    meta = dict(template.get("metadata") or {})
    meta.pop("generateName", None)
    labels = {**(meta.get("labels") or {}), **(label or {})}
    labels |= {"kubernetes.io/hostname": name, "type": "kwok"}
    annotations = {**(meta.get("annotations") or {}), KWOK_ANNOTATION: "fake"}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {**meta, "name": name, "labels": labels, "annotations": annotations},
        "spec": dict(template.get("spec") or {}),
    }
    capacity = dict((template.get("status") or {}).get("capacity") or {})
    allocatable = dict((template.get("status") or {}).get("allocatable") or capacity)
    return body, {"capacity": capacity, "allocatable": allocatable}


def pod_body(template: Mapping[str, Any], name: str, scheduler: str) -> dict[str, Any]:
    meta = dict(template.get("metadata") or {})
    meta.pop("generateName", None)
    spec = {**(template.get("spec") or {}), "schedulerName": scheduler}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name}, "spec": spec}


async def create_nodes(kube: KubeClient, workload: Workload) -> None:
    sem = asyncio.Semaphore(32)
    bodies = []
    for step in workload.nodes:
        for j in range(step.count):
            label = None
            if step.label is not None:
                key, values = step.label
                label = {key: values[j % len(values)]}  # round robin, as upstream
            bodies.append(node_body(step.template, len(bodies), label))

    async def one(body: dict[str, Any], status: dict[str, Any]) -> None:
        async with sem:
            await kube.create(NODES, body)
            await kube.patch(
                NODES, body["metadata"]["name"], {"status": status}, subresource="status"
            )

    await asyncio.gather(*(one(b, s) for b, s in bodies))


async def _create(
    kube: KubeClient, namespace: str, bodies: Sequence[dict[str, Any]], sent: dict[str, float]
) -> None:
    sem = asyncio.Semaphore(CREATORS)

    async def one(body: dict[str, Any]) -> None:
        async with sem:
            sent[body["metadata"]["name"]] = time.perf_counter()
            await kube.create(PODS, body, namespace=namespace)

    await asyncio.gather(*(one(b) for b in bodies))


async def _wait_all_bound(kube: KubeClient, namespace: str, count: int, proc: Process) -> None:
    deadline = time.perf_counter() + 300
    while time.perf_counter() < deadline:
        proc.check()
        listed = await kube.list(PODS, namespace=namespace)
        if sum(1 for p in listed["items"] if p["spec"].get("nodeName")) >= count:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{proc.name}: the {count} unmeasured pods not all bound in 300 s")


async def _ensure_namespace(kube: KubeClient, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with contextlib.suppress(AlreadyExists):  # the workload's own, kept between turns
        await kube.create(NAMESPACES, body)


async def _churn(
    kube: KubeClient, churn: Churn, namespace: str, scheduler: str, stop: asyncio.Event
) -> None:
    """Create ``churn``'s pods until ``stop`` (or its number is reached)."""
    made = 0
    while not stop.is_set() and (churn.number == 0 or made < churn.number):
        for template in churn.templates:
            await kube.create(
                PODS, pod_body(template, f"churn-{made:05d}", scheduler), namespace=namespace
            )
            made += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), churn.interval_s)


def namespaces_of(workload: Workload, run_namespace: str) -> dict[str, str]:
    """Where each kind of pod goes in one turn: ``init``, ``measured``, ``churn-<i>`` → namespace
    (a step's own, else one of the run's)."""
    init = {s.namespace for s in workload.pods if not s.measured}
    measured = next(s.namespace for s in workload.pods if s.measured)
    out = {
        "init": f"{run_namespace}-init",
        "measured": measured or run_namespace,
    }
    out |= {f"init:{ns}": ns for ns in init if ns}
    for i, churn in enumerate(workload.churn):
        out[f"churn-{i}"] = churn.namespace or f"{run_namespace}-churn-{i}"
    return out


async def one_run(
    plane: ControlPlane,
    kube: KubeClient,
    proc: Process,
    workload: Workload,
    run: Run,
    namespace: str,
    *,
    timeout_s: float,
    profile: Path | None = None,
) -> None:
    scheduler_name = SCHEDULERS[run.scheduler]
    spaces = namespaces_of(workload, namespace)
    for name in sorted({*spaces.values(), *workload.namespaces}):
        await _ensure_namespace(kube, name)  # the watch sees the measured pods only
    by_space: dict[str, list[dict[str, Any]]] = {}
    index = 0
    for s in workload.pods:
        if s.measured:
            continue
        where = s.namespace or spaces["init"]
        for _ in range(s.count):
            by_space.setdefault(where, []).append(
                pod_body(s.template, f"init-{index:05d}", scheduler_name)
            )
            index += 1
    for where, bodies in by_space.items():
        await _create(kube, where, bodies, {})
    # The scheduler has synced and binds once these are bound (its start-up is not measured).
    for where, bodies in by_space.items():
        await _wait_all_bound(kube, where, len(bodies), proc)
    namespace = spaces["measured"]
    listed = await kube.list(PODS, namespace=namespace, limit=1)
    done = asyncio.Event()
    watcher = asyncio.create_task(watch(kube, namespace, listed["resourceVersion"], run, done))
    requests0 = await asyncio.to_thread(requests_total, plane)
    spy = None if profile is None else start_profiler(proc.pid, profile)
    cpu0 = cpu_seconds(proc.pid)
    measured = [
        pod_body(s.template, f"p-{i:05d}", scheduler_name)
        for i, s in enumerate(s for s in workload.pods if s.measured for _ in range(s.count))
    ]
    stop = asyncio.Event()
    churning = [
        asyncio.create_task(_churn(kube, c, spaces[f"churn-{i}"], scheduler_name, stop))
        for i, c in enumerate(workload.churn)
    ]
    t0 = time.perf_counter()
    await _create(kube, namespace, measured, run.sent)
    run.created_s = time.perf_counter() - t0
    try:
        async with asyncio.timeout(timeout_s):
            while len(run.bound) < run.pods:
                proc.check()
                await asyncio.sleep(0.05)
    except TimeoutError:
        run.timed_out = True
    stop.set()
    await asyncio.gather(*churning)
    run.cpu_s = cpu_seconds(proc.pid) - cpu0
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(spy.wait, 30)
    run.load = os.getloadavg()[0]
    with contextlib.suppress(psutil.Error):
        run.rss_mib = psutil.Process(proc.pid).memory_info().rss / 2**20
    run.requests = scheduler_share(requests0, await asyncio.to_thread(requests_total, plane))
    run.requests["LIST", "pods", ""] -= 1  # the benchmark's own list and watch
    run.requests["WATCH", "pods", ""] -= 1
    run.requests = +run.requests
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher


def _ms(value: float) -> int | None:
    return None if math.isnan(value) else round(value)  # no pod bound: no latency


def row(run: Run) -> dict[str, Any]:
    return {
        "scheduler": run.scheduler,
        "pods": run.pods,
        "bound": len(run.bound),
        "pods_per_s": round(run.rate, 1),
        "p50_ms": _ms(run.latency_ms(50)),
        "p99_ms": _ms(run.latency_ms(99)),
        "cpu_ms_per_pod": round(run.cpu_ms_per_pod, 2),
        "requests_per_pod": round(run.requests_per_pod, 2),
        "rss_mib": round(run.rss_mib),
        "created_per_s": round(run.create_rate),
        "timed_out": run.timed_out,
    }


async def bench(
    workload: Workload,
    *,
    limit: Limit,
    order: Sequence[str],
    timeout_s: float,
    profile: Path | None = None,
) -> list[Run]:
    binaries = ensure(extra=True, log=False)
    work = Path(tempfile.mkdtemp(prefix="topos-sched-perf-"))
    plane = ControlPlane.start(
        binaries=binaries,
        settings=ControlPlaneSettings(controllers=(), extra_apiserver_args=PERF_APISERVER_ARGS),
    )
    kwok: Process | None = None
    runs: list[Run] = []
    try:
        kube = await KubeClient.connect(plane.kubeconfig)
        try:
            kwok = start_kwok(binaries, plane, work)
            compile_topos()
            await create_nodes(kube, workload)
            await wait_ready(kube, workload.node_count)
            for i, name in enumerate(order):
                tag = f"{name}-{i}"
                if name == "kube-scheduler":
                    proc = start_kube_scheduler(binaries, plane, work, limit, tag)
                else:
                    proc = start_topos(plane, work, limit, tag, binds=64)
                run = Run(name, limit, workload.measured_pods)
                namespace = f"perf-{tag}"
                try:
                    spy = None
                    if profile is not None and name == "topos":
                        spy = profile / f"topos-{tag}.txt"
                    await one_run(
                        plane,
                        kube,
                        proc,
                        workload,
                        run,
                        namespace,
                        timeout_s=timeout_s,
                        profile=spy,
                    )
                finally:
                    proc.stop()
                runs.append(run)
                for where in sorted(set(namespaces_of(workload, namespace).values())):
                    await clear(kube, where)
        finally:
            await kube.close()
    finally:
        if kwok is not None:
            kwok.stop()
        plane.stop()
        shutil.rmtree(work, ignore_errors=True)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scheduler_perf")
    ap.add_argument(
        "--config",
        default="misc/performance-config.yaml",
        help=f"under {PERF_DIR}/ in the module, or a path",
    )
    ap.add_argument("--case", default="SchedulingBasic")
    ap.add_argument("--workload", default="500Nodes")
    ap.add_argument("--limit", default="unlimited", help="client QPS/burst, e.g. 50/100")
    ap.add_argument("--order", default="kube-scheduler,topos")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per measured run")
    ap.add_argument(
        "--param", action="append", default=[], help="name=count: override a workload parameter"
    )
    ap.add_argument(
        "--profile",
        type=Path,
        help="a folder: py-spy records the coordinator during its measured phase (raw stacks)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    order = [x.strip() for x in args.order.split(",") if x.strip()]
    unknown = [x for x in order if x not in SCHEDULERS]
    if unknown:
        ap.error(f"--order: {unknown[0]!r} is not a scheduler here ({', '.join(SCHEDULERS)})")
    limits = parse_limits(args.limit)
    if len(limits) != 1:
        ap.error(f"--limit: {args.limit!r}: give one limit")
    config = Path(args.config)
    if not config.is_file():
        config = module_dir() / PERF_DIR / args.config
    try:
        overrides = parse_params(args.param)
        workload = load_workload(config, args.case, args.workload, overrides)
    except WorkloadError as exc:
        print(f"scheduler_perf: {exc}", file=sys.stderr)
        return 2
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    runs = asyncio.run(
        bench(workload, limit=limits[0], order=order, timeout_s=args.timeout, profile=args.profile)
    )
    rows = [row(r) for r in runs]
    if args.json:
        print(
            json.dumps(
                {
                    "case": workload.case,
                    "workload": workload.name,
                    "params": overrides,
                    "runs": rows,
                }
            )
        )
    else:
        print(
            f"scheduler_perf {workload.case}/{workload.name}: {workload.node_count} KWOK nodes, "
            f"{workload.measured_pods} measured pods, client {limits[0].label} "
            f"(Kubernetes v{KUBERNETES_VERSION})"
            + (f", params overridden: {overrides}" if overrides else "")
        )
        for r in runs:
            print(r.summary())
        by = {r.scheduler: r for r in runs}
        if {"topos", "kube-scheduler"} <= by.keys() and by["kube-scheduler"].rate:
            kube, topos = by["kube-scheduler"], by["topos"]
            print(
                f"Topos/kube-scheduler: pods/s {topos.rate / kube.rate:.2f}x, CPU per pod "
                f"{topos.cpu_ms_per_pod / max(kube.cpu_ms_per_pod, 1e-9):.2f}x, requests per pod "
                f"{topos.requests_per_pod / max(kube.requests_per_pod, 1e-9):.2f}x"
            )
    return 1 if any(r.timed_out for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
