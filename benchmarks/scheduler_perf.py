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

Only the opcodes SchedulingBasic-like cases use are read (``createNodes``, ``createPods``);
another opcode, a templated (``{{…}}``) file or a missing parameter is an error naming it.

    .venv/bin/python -m benchmarks.scheduler_perf [--case SchedulingBasic] [--workload 500Nodes]
        [--config misc/performance-config.yaml] [--limit unlimited] [--order kube-scheduler,topos]
        [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
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
    start_topos,
    wait_ready,
)
from benchmarks.kwok_run import Run, cpu_seconds
from benchmarks.kwok_settle import clear
from benchmarks.kwok_throughput import watch
from common.kube import NAMESPACES, NODES, PODS, KubeClient
from devcluster.binaries import (
    KUBERNETES_VERSION,
    _go,
    _go_env,
    _module_download,
    ensure,
)
from devcluster.controlplane import ControlPlane, ControlPlaneSettings

SCHEDULERS = {"kube-scheduler": "default-scheduler", "topos": "topos"}
PERF_DIR = "test/integration/scheduler_perf"
CREATORS = 32


class WorkloadError(ValueError):
    """The workload YAML asks for something this runner does not read; the message names it."""


@dataclass(frozen=True, slots=True)
class Step:
    template: dict[str, Any]
    count: int
    measured: bool = False


@dataclass(frozen=True, slots=True)
class Workload:
    case: str
    name: str
    nodes: tuple[Step, ...]
    pods: tuple[Step, ...]

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


def load_workload(config: Path, case: str, workload: str) -> Workload:
    """One workload of one test case of a scheduler_perf ``performance-config.yaml``."""
    cases = yaml.safe_load(config.read_text()) or []
    found = next((c for c in cases if c.get("name") == case), None)
    if found is None:
        known = ", ".join(str(c.get("name")) for c in cases)
        raise WorkloadError(f"test case {case!r} is not in {config} (it has: {known})")
    chosen = next((w for w in found.get("workloads") or () if w.get("name") == workload), None)
    if chosen is None:
        known = ", ".join(str(w.get("name")) for w in found.get("workloads") or ())
        raise WorkloadError(f"{case}: no workload {workload!r} (it has: {known})")
    params = chosen.get("params") or {}
    base = config.parent
    default_pod = found.get("defaultPodTemplatePath")
    nodes: list[Step] = []
    pods: list[Step] = []
    for i, op in enumerate(found.get("workloadTemplate") or ()):
        where = f"{case}.workloadTemplate[{i}]"
        opcode = op.get("opcode")
        if opcode == "createNodes":
            count = _count(op, params, where)
            path = op.get("nodeTemplatePath") or "../templates/node-default.yaml"
            nodes.append(Step(_template(base / path), count))
        elif opcode == "createPods":
            path = op.get("podTemplatePath") or default_pod
            if not path:
                raise WorkloadError(f"{where}: no podTemplatePath and no defaultPodTemplatePath")
            count = _count(op, params, where)
            measured = bool(op.get("collectMetrics"))
            pods.append(Step(_template(base / path), count, measured))
        else:
            raise WorkloadError(f"{where}.opcode: {opcode!r} is not read by this runner")
    if not any(s.measured for s in pods):
        raise WorkloadError(f"{case}/{workload}: no createPods step with collectMetrics")
    return Workload(case, workload, tuple(nodes), tuple(pods))


def node_body(template: Mapping[str, Any], index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Node (named, handed to KWOK) and the status to write, from the node template."""
    name = f"perf-node-{index:05d}"
    meta = dict(template.get("metadata") or {})
    meta.pop("generateName", None)
    labels = {**(meta.get("labels") or {}), "kubernetes.io/hostname": name, "type": "kwok"}
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
    bodies = [
        node_body(step.template, i)
        for i, step in enumerate(s for s in workload.nodes for _ in range(s.count))
    ]

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


async def one_run(
    plane: ControlPlane,
    kube: KubeClient,
    proc: Process,
    workload: Workload,
    run: Run,
    namespace: str,
    *,
    timeout_s: float,
) -> None:
    scheduler_name = SCHEDULERS[run.scheduler]
    for name in (f"{namespace}-init", namespace):  # the watch sees the measured pods only
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    unmeasured = [s for s in workload.pods if not s.measured]
    bodies = [
        pod_body(s.template, f"init-{i:05d}", scheduler_name)
        for i, s in enumerate(s for s in unmeasured for _ in range(s.count))
    ]
    await _create(kube, f"{namespace}-init", bodies, {})
    # The scheduler has synced and binds once these are bound (its start-up is not measured).
    await _wait_all_bound(kube, f"{namespace}-init", len(bodies), proc)
    listed = await kube.list(PODS, namespace=namespace, limit=1)
    done = asyncio.Event()
    watcher = asyncio.create_task(watch(kube, namespace, listed["resourceVersion"], run, done))
    requests0 = await asyncio.to_thread(requests_total, plane)
    cpu0 = cpu_seconds(proc.pid)
    measured = [
        pod_body(s.template, f"p-{i:05d}", scheduler_name)
        for i, s in enumerate(s for s in workload.pods if s.measured for _ in range(s.count))
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
    run.cpu_s = cpu_seconds(proc.pid) - cpu0
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


def row(run: Run) -> dict[str, Any]:
    return {
        "scheduler": run.scheduler,
        "pods": run.pods,
        "bound": len(run.bound),
        "pods_per_s": round(run.rate, 1),
        "p50_ms": round(run.latency_ms(50)),
        "p99_ms": round(run.latency_ms(99)),
        "cpu_ms_per_pod": round(run.cpu_ms_per_pod, 2),
        "requests_per_pod": round(run.requests_per_pod, 2),
        "rss_mib": round(run.rss_mib),
        "created_per_s": round(run.create_rate),
        "timed_out": run.timed_out,
    }


async def bench(
    workload: Workload, *, limit: Limit, order: Sequence[str], timeout_s: float
) -> list[Run]:
    binaries = ensure(extra=True, log=False)
    work = Path(tempfile.mkdtemp(prefix="topos-sched-perf-"))
    plane = ControlPlane.start(
        binaries=binaries,
        settings=ControlPlaneSettings(controllers=(), extra_apiserver_args=APISERVER_ARGS),
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
                    await one_run(plane, kube, proc, workload, run, namespace, timeout_s=timeout_s)
                finally:
                    proc.stop()
                runs.append(run)
                await clear(kube, namespace)
                await clear(kube, f"{namespace}-init")
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
        workload = load_workload(config, args.case, args.workload)
    except WorkloadError as exc:
        print(f"scheduler_perf: {exc}", file=sys.stderr)
        return 2
    runs = asyncio.run(bench(workload, limit=limits[0], order=order, timeout_s=args.timeout))
    rows = [row(r) for r in runs]
    if args.json:
        print(json.dumps({"case": workload.case, "workload": workload.name, "runs": rows}))
    else:
        print(
            f"scheduler_perf {workload.case}/{workload.name}: {workload.node_count} KWOK nodes, "
            f"{workload.measured_pods} measured pods, client {limits[0].label} "
            f"(Kubernetes v{KUBERNETES_VERSION})"
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
