"""``make conformance``: upstream's ``[sig-scheduling]`` e2e tests against Topos as
``default-scheduler``, on the test control plane with KWOK nodes, results in docs/conformance.md.

    .venv/bin/python -m devcluster.conformance [--nodes 2] [--focus REGEX] [--write FILE] [--keep]

What runs:

- the control plane (``devcluster.controlplane``: etcd, kube-apiserver, kube-controller-manager)
  with the controllers upstream's framework needs on top of the tests' own (``CONTROLLERS``:
  namespaces are deleted after each test, every namespace gets its ``default`` ServiceAccount),
  and the ``TaintNodesByCondition`` admission plugin off: no node lifecycle controller runs to
  lift the not-ready taint it puts on new Nodes (as in ``benchmarks/kwok_cluster.py``);
- ``--nodes`` Nodes (``node_body``: 4 CPUs, 16 GiB, 100 GiB ephemeral storage, 110 pods, two
  zones) handed to one ``kwok`` process, which makes them Ready and runs bound pods (KWOK's own
  ``fast`` stages), the per-node kube-system pods the framework waits for (``NODE_DAEMONS``), and
  a thread doing two duties of the kubelet that KWOK does not (``kubelet_duties``): allocatable
  follows capacity, deleted pods are removed by UID;
- one ``topos coordinator`` whose only profile is ``default-scheduler`` (no kube-scheduler runs);
- ``e2e.test`` (``devcluster.e2e_binary``: built once, cached) with ``--ginkgo.focus`` the
  ``[sig-scheduling]`` tests and ``--ginkgo.skip`` the ``SKIPS`` below, serially, its JSON report
  read back and written as a table (``render``).

Every test that is left out is in ``SKIPS`` with its reason; a test that skips itself (say, for
want of zones) is listed with the reason it gave.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from common.kube import NODES, PODS, KubeClient
from devcluster import e2e_binary
from devcluster.binaries import KUBERNETES_VERSION, BinariesUnavailable, ensure
from devcluster.controllers import CONTROLLERS as TEST_CONTROLLERS
from devcluster.controlplane import ControlPlane, ControlPlaneError, ControlPlaneSettings
from devcluster.kubelet import kwok_args
from devcluster.processes import free_port, spawn, stop_group
from devcluster.terminations import Terminations

_ROOT: Final = Path(__file__).resolve().parents[1]
FOCUS: Final = r"\[sig-scheduling\]"

#: Beyond the test plane's: what upstream's framework relies on in every test.
CONTROLLERS: Final = (
    *TEST_CONTROLLERS,
    "namespace-controller",  # namespaces are deleted after each test, and waited for
    "serviceaccount-controller",  # each test waits for its namespace's ``default`` account
    "root-ca-certificate-publisher-controller",  # kube-root-ca.crt, which pods' tokens mount
    "persistentvolume-binder-controller",  # a PVC test binds a claim to a local volume
    "replicationcontroller-controller",  # Multi-AZ spreads a ReplicationController's pods
    "podgroup-protection-controller",  # a deleted PodGroup goes once its pods are gone
)
APISERVER_ARGS: Final = ("--disable-admission-plugins=TaintNodesByCondition",)
KWOK_ANNOTATION: Final = "kwok.x-k8s.io/node"
KWOK_STAGES: Final = (
    "node/fast/node-initialize.yaml",
    "pod/fast/pod-ready.yaml",
)  # no pod-delete: ``kubelet_duties`` removes deleted pods (by UID, unlike KWOK)
ZONES: Final = ("zone-a", "zone-b")
#: The per-node pods upstream's framework waits for on every schedulable Node before some tests
#: (``e2enode.WaitForTotalHealthy``: a minute lost per test without them); on a real cluster the
#: kube-proxy, fluentd and node-problem-detector DaemonSets run them. Bound here through
#: ``pods/binding`` (so ``PodScheduled`` is True, as tests check), no requests, run by KWOK.
NODE_DAEMONS: Final = ("kube-proxy", "fluentd-elasticsearch", "node-problem-detector")
NODE_CAPACITY: Final = {
    "cpu": "4",
    "memory": "16Gi",
    "ephemeral-storage": "100Gi",
    "pods": "110",
}


@dataclass(frozen=True, slots=True)
class Skip:
    """Tests (a regular expression over the full name) left out, and why."""

    pattern: str
    reason: str


#: Left out of every run. Only tags upstream itself marks as unfit for a shared or simulated
#: cluster; each further entry names what KWOK cannot give.
SKIPS: Final[tuple[Skip, ...]] = (
    Skip(r"\[Disruptive\]", "upstream marks it disruptive (restarts or breaks nodes)"),
    Skip(r"\[Flaky\]", "upstream marks it flaky"),
    Skip(
        r"validates various priority Pods preempt expectedly with the async preemption",
        "needs the kubelet to run the victims' preStop hook (sleep 79 s in an 80 s grace period) "
        "so that they stay Terminating while the test looks; KWOK removes a terminating pod at "
        "once, and the test fails on 'pod … not found'",
    ),
)


#: Failures whose cause is known, by test (a regular expression over the full name): the
#: diagnosis printed beside the failure until a run passes it.
DIAGNOSES: Final[tuple[Skip, ...]] = (
    Skip(
        r"PodTopologySpread Preemption validates proper pods are preempted",
        "a Topos bug: preemption picks victims by resources alone and does not re-check the "
        "pod's topology spread with them gone — it evicts one low pod where two must go for "
        "maxSkew 1, and the pod stays Pending ('didn't match pod topology spread constraints')",
    ),
)


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    state: str  # "passed", "failed", "skipped"
    seconds: float
    reason: str = ""


@dataclass(slots=True)
class Run:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    nodes: int = 0
    suite_failure: str = ""

    def count(self, state: str) -> int:
        return sum(1 for r in self.results if r.state == state)


def skip_regex(skips: Iterable[Skip]) -> str:
    return "|".join(f"(?:{s.pattern})" for s in skips)


def skip_reason(name: str, skips: Iterable[Skip]) -> str | None:
    return next((s.reason for s in skips if re.search(s.pattern, name)), None)


def node_body(index: int) -> dict[str, Any]:
    name = f"kwok-node-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
                "type": "kwok",
            },
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
    }


def daemon_pod(daemon: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{daemon}-{node}", "namespace": "kube-system"},
        "spec": {
            "schedulerName": "conformance-harness",  # nobody's: bound below, not scheduled
            "containers": [{"name": daemon, "image": "registry.k8s.io/pause:3.10.2"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def _first_line(text: str, limit: int = 240) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = " ".join(lines[:2]) if lines else ""
    line = line.replace("|", "\\|")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def parse_report(
    report: Sequence[Mapping[str, Any]], skips: Iterable[Skip] = SKIPS, focus: str = FOCUS
) -> Run:
    """The ``[sig-scheduling]`` specs of ginkgo's JSON report (``--ginkgo.json-report``) that
    ``focus`` names, each with its state and, for failures and skips, one line of why."""
    skips = tuple(skips)
    run = Run()
    for suite in report:
        for spec in suite.get("SpecReports") or ():
            texts = [*(spec.get("ContainerHierarchyTexts") or ()), spec.get("LeafNodeText") or ""]
            name = " ".join(t for t in texts if t).strip()
            state = str(spec.get("State") or "")
            failure = str((spec.get("Failure") or {}).get("Message") or "")
            if spec.get("LeafNodeType") != "It":
                if state not in ("passed", "skipped", "pending") and failure:
                    run.suite_failure = _first_line(f"{spec.get('LeafNodeType')}: {failure}")
                continue
            if not re.search(FOCUS, name) or not re.search(focus, name):
                continue
            seconds = float(spec.get("RunTime") or 0) / 1e9
            if state == "passed":
                run.results.append(Result(name, "passed", seconds))
            elif state in ("skipped", "pending"):
                ours = skip_reason(name, skips)
                reason = ours or _first_line(failure) or "skipped by upstream"
                run.results.append(Result(name, "skipped", seconds, reason))
            else:
                run.results.append(Result(name, "failed", seconds, _first_line(failure or state)))
    run.results.sort(key=lambda r: r.name)
    return run


def render(run: Run, *, when: datetime.datetime, machine: str) -> str:
    """docs/conformance.md."""
    passed, failed, skipped = run.count("passed"), run.count("failed"), run.count("skipped")
    lines = [
        "# Upstream's scheduling e2e tests against Topos",
        "",
        "`make conformance` (`devcluster/conformance.py`) runs the `[sig-scheduling]` tests of",
        f"Kubernetes v{KUBERNETES_VERSION}'s own e2e suite (`k8s.io/kubernetes/test/e2e`, built",
        "once by `devcluster/e2e_binary.py` and cached in `~/.cache/topos/e2e/`) against the test",
        "control plane with KWOK nodes and Topos as `default-scheduler` — a coordinator whose only",
        "profile carries that name; no kube-scheduler runs. How often and why:",
        "[testing.md](testing.md#upstream-conformance).",
        "",
        f"Last run: {when:%Y-%m-%d %H:%M} UTC on {machine}; {run.nodes} KWOK nodes; "
        f"{run.seconds / 60:.1f} min in all.",
        "",
        f"**{passed} passed, {failed} failed, {skipped} skipped** of {len(run.results)}.",
        "",
    ]
    if run.suite_failure:
        lines += [f"The suite's set-up failed: {run.suite_failure}", ""]
    lines += ["| test | result | s |", "|---|---|---|"]
    for r in run.results:
        name = r.name.replace("|", "\\|")
        lines.append(f"| {name} | {r.state} | {r.seconds:.0f} |")
    failures = [r for r in run.results if r.state == "failed"]
    if failures:
        lines += ["", "## Failures", ""]
        for r in failures:
            known = skip_reason(r.name, DIAGNOSES)
            lines.append(f"- **{r.name}**: {r.reason}" + (f" — *cause:* {known}" if known else ""))
    skips = [r for r in run.results if r.state == "skipped"]
    if skips:
        lines += ["", "## Skipped, and why", ""]
        lines += [f"- **{r.name}**: {r.reason}" for r in skips]
    lines += [
        "",
        "The skip list (`SKIPS` in `devcluster/conformance.py`) holds only what upstream marks",
        "unfit (`[Disruptive]`, `[Flaky]`) and what KWOK cannot give; a test that skips itself",
        "says why above.",
        "",
    ]
    return "\n".join(lines)


async def _create_nodes(kubeconfig: Path, count: int) -> None:
    kube = await KubeClient.connect(kubeconfig)
    try:
        status = {"capacity": dict(NODE_CAPACITY), "allocatable": dict(NODE_CAPACITY)}
        for i in range(count):
            body = node_body(i)
            await kube.create(NODES, body)
            await kube.patch(
                NODES, body["metadata"]["name"], {"status": status}, subresource="status"
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listed = await kube.list(NODES, label_selector="type=kwok")
            ready = [
                n
                for n in listed["items"]
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or ()
                )
            ]
            if len(ready) >= count:
                for node in ready:
                    for daemon in NODE_DAEMONS:
                        name = node["metadata"]["name"]
                        pod = daemon_pod(daemon, name)
                        await kube.create(PODS, pod, namespace="kube-system")
                        await kube.bind(
                            namespace="kube-system", pod=pod["metadata"]["name"], node=name
                        )
                return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"KWOK nodes not Ready after 120 s ({count} created)")
    finally:
        await kube.close()


def allocatable_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the kubelet's status sync would write: allocatable follows capacity (no reservations
    here), an extended resource gone from capacity leaves allocatable. ``None``: nothing to do."""
    status = node.get("status") or {}
    capacity = dict(status.get("capacity") or {})
    allocatable = dict(status.get("allocatable") or {})
    if capacity == allocatable:
        return None
    gone: dict[str, Any] = {k: None for k in allocatable if k not in capacity}
    return {"status": {"allocatable": {**capacity, **gone}}}


async def _kubelet_duties(kubeconfig: Path, nodes: Collection[str], stop: threading.Event) -> None:
    kube = await KubeClient.connect(kubeconfig)
    terminations = asyncio.create_task(Terminations(kube, nodes).run())
    try:
        while not stop.is_set():
            for node in (await kube.list(NODES, label_selector="type=kwok"))["items"]:
                patch = allocatable_patch(node)
                if patch is not None:
                    name = node["metadata"]["name"]
                    await kube.patch(NODES, name, patch, subresource="status")
            await asyncio.sleep(0.5)
    finally:
        terminations.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await terminations
        await kube.close()


@contextlib.contextmanager
def kubelet_duties(kubeconfig: Path, nodes: Collection[str]) -> Iterator[None]:
    """What the kubelet does that upstream's tests rely on and KWOK does not do, in a thread:

    - its node status sync copies capacity to allocatable (``allocatable_patch``): tests add an
      extended resource to a Node's *capacity* and expect it schedulable;
    - its status manager removes a deleted pod with the pod's UID as precondition
      (``devcluster.terminations``); KWOK's own delete stage deletes by name and so removed a
      pod re-created under a deleted one's name (tests reuse ``without-label``).
    """
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(_kubelet_duties(kubeconfig, nodes, stop)), daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _topos_config(port: int) -> dict[str, Any]:
    return {
        "coordinator": {"listen": f"127.0.0.1:{port}"},
        "auth": {"enabled": False},
        "leaderElection": {"enabled": False},
        "scheduler": {"enabled": True},
        "scheduling": {"profiles": [{"schedulerName": "default-scheduler"}]},
    }


def _wait_ready(url: str, process: Any, log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"topos coordinator exited ({process.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"topos coordinator not ready after {timeout_s:.0f}s; see {log}")


def run(*, nodes: int, focus: str, work: Path, binary: Path, ginkgo_timeout: str = "2h") -> Run:
    """Start everything, run the tests, stop everything; the results."""
    binaries = ensure(extra=True)  # kwok and its stock stages (and a kube-scheduler, unused)
    if binaries.kwok is None or binaries.kwok_stages is None:
        raise BinariesUnavailable(
            "kwok or its stages missing: python -m devcluster.binaries ensure --all"
        )
    settings = ControlPlaneSettings(controllers=CONTROLLERS, extra_apiserver_args=APISERVER_ARGS)
    started = time.monotonic()
    processes = []
    plane = ControlPlane.start(binaries=binaries, directory=work / "plane", settings=settings)
    with plane:
        try:
            kwok_kubeconfig = plane.write_user_kubeconfig(
                work / "kwok.kubeconfig", user="kwok-controller", groups=("system:masters",)
            )
            kwok = spawn(
                kwok_args(
                    binaries.kwok,
                    kwok_kubeconfig,
                    stage_files=[binaries.kwok_stages / s for s in KWOK_STAGES],
                    manage=f"manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                ),
                log_path=work / "kwok.log",
                die_with_parent=True,
            )
            processes.append(kwok)
            asyncio.run(_create_nodes(plane.kubeconfig, nodes))
            topos_kubeconfig = plane.write_user_kubeconfig(
                work / "topos.kubeconfig", user="topos-coordinator", groups=("system:masters",)
            )
            port = free_port()
            config = work / "topos.yaml"
            config.write_text(yaml.safe_dump(_topos_config(port)))
            topos = spawn(
                [
                    sys.executable,
                    "-m",
                    "coordinator.app.main",
                    f"--kubeconfig={topos_kubeconfig}",
                    f"--config={config}",
                ],
                log_path=work / "topos.log",
                die_with_parent=True,
                cwd=_ROOT,
            )
            processes.append(topos)
            _wait_ready(f"http://127.0.0.1:{port}", topos, work / "topos.log")
            report = work / "report.json"
            argv = [
                str(binary),
                f"--kubeconfig={plane.kubeconfig}",
                "--provider=skeleton",
                f"--report-dir={work / 'report'}",
                f"--ginkgo.focus={focus}",
                f"--ginkgo.skip={skip_regex(SKIPS)}",
                f"--ginkgo.json-report={report}",
                f"--ginkgo.timeout={ginkgo_timeout}",
                "--ginkgo.no-color",
                "--ginkgo.v",
            ]
            names = [node_body(i)["metadata"]["name"] for i in range(nodes)]
            with kubelet_duties(plane.kubeconfig, names):
                e2e = spawn(argv, log_path=work / "e2e.log", die_with_parent=True, cwd=work)
                e2e.wait()
            if not report.is_file():
                raise RuntimeError(
                    f"e2e.test exited {e2e.returncode} without a report; see {work / 'e2e.log'}"
                )
            result = parse_report(json.loads(report.read_text()), focus=focus)
        finally:
            for process in reversed(processes):
                if process.poll() is None:
                    stop_group(process.pid, grace_s=10.0)
    result.seconds = time.monotonic() - started
    result.nodes = nodes
    return result


def machine() -> str:
    cpus = os.cpu_count() or 0
    load = os.getloadavg()[0]
    return f"{platform.machine()} Linux, {cpus} cores (load {load:.1f} at the end)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.conformance")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--focus", default=FOCUS, help="ginkgo focus regex (default: %(default)s)")
    parser.add_argument("--write", type=Path, help="write the results there (docs/conformance.md)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error(f"--nodes: {args.nodes}: at least one node is needed")
    try:
        binary = e2e_binary.ensure()
    except BinariesUnavailable as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="topos-conformance-"))
    try:
        result = run(nodes=args.nodes, focus=args.focus, work=work, binary=binary)
    except (ControlPlaneError, RuntimeError, BinariesUnavailable) as exc:
        print(f"conformance: {exc} (work directory kept: {work})", file=sys.stderr)
        return 1
    text = render(result, when=datetime.datetime.now(datetime.UTC), machine=machine())
    if args.write:
        args.write.write_text(text)
    print(text)
    if args.keep:
        print(f"conformance: logs in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if result.count("failed") or result.suite_failure else 0


if __name__ == "__main__":
    sys.exit(main())
