"""Shared fixtures: a real etcd + kube-apiserver + kube-controller-manager for the whole session.

Fixtures (use them by name; a test that does is marked ``kube`` automatically):

- ``control_plane`` (session): the running ``devcluster.controlplane.ControlPlane``, started once
  on free 127.0.0.1 ports and stopped at the end of the session, with kube-controller-manager
  running the controllers of ``devcluster.controllers.CONTROLLERS`` (ResourceClaims from
  templates and released when pods finish, Jobs/ReplicaSets/Deployments make pods, garbage
  collection: a pod whose owner does not exist is deleted, device-taint eviction: a pod holding
  a device tainted ``NoExecute`` is deleted); it serves DeviceTaintRules
  (``resource.k8s.io/v1beta2``, gate ``DRADeviceTaintRules``). ``.kubeconfig`` is an admin
  kubeconfig (client certificate in ``system:masters``), ``.server`` the URL, and
  ``.write_user_kubeconfig(path, user=…, groups=…)`` mints a less privileged identity.
- ``kubeconfig`` (session): ``Path`` of that admin kubeconfig.
- ``kube`` (function, async): a connected ``common.kube.KubeClient`` (admin), closed afterwards.
- ``namespace`` (function, async): a fresh namespace for this test, e.g. ``t-my-test-3f9a1c``.
  Nothing deletes it (no namespace controller runs, so deletion would never finish); it vanishes
  with the control plane.
- ``unique_name`` (function): ``unique_name("node")`` → ``node-5d0c2e…``, for cluster-scoped
  objects such as Nodes that several tests create.
- ``k8s_binaries`` (session): ``devcluster.binaries.Binaries`` (paths of etcd, kube-apiserver,
  kube-controller-manager, kubectl), for tests that start their own control plane or run the
  binaries themselves.
- ``kube_scheduler_name`` (session): the ``schedulerName`` of a real kube-scheduler running on
  the control plane (``devcluster.scheduler``); only pods naming it are its business. Skipped
  (failed under ``CI=true``) when kube-scheduler is not built.
- ``kubectl`` (session): ``kubectl("get", "ns")`` runs the harness's kubectl against the control
  plane and returns the ``CompletedProcess`` (text, not checked).
- ``workload_plane`` (session): a control plane of its own for the real workload controllers
  (``devcluster.workloads``), its kube-controller-manager running the StatefulSet controller
  too; ``workload_kube`` / ``workload_namespace`` (function) are ``kube`` / ``namespace`` on it.
- ``jobset_controller``, ``lws_controller``, ``trainer_controller``, ``kuberay_controller``,
  ``kueue_controller`` (session): that controller (and what it requires: Trainer runs JobSet,
  Kueue JobSet and LWS) started on
  ``workload_plane`` the first time a test asks, with its CRDs and webhooks; the value is its
  cached build (``devcluster.workloads.build.Built``: binary, module files). Skipped (failed
  under ``CI=true``) when it cannot be built (``make controllers``).
- ``uncached_plane`` (session): a second control plane whose API server has no watch cache, so
  etcd compaction shows as 410 Gone (``tests.support.etcd.compact``), and refuses watch lists
  (``WatchList`` off, as a server before 1.34 or one that turned it off), so what runs on it
  lists page by page. Started only if asked for.

The control plane is shared by every test of the session. A coordinator started on it
(``coordinator.app.main.wire``) runs a scheduler that would bind *other tests'* pending pods
unless its ``scheduler`` config section names the test's namespace or a node selector, or turns
it off; tests marked ``kube`` fail at once if they start one that does not. Its leader election
(on by default against an API server) uses a Lease of the test's own when the config names none.

Shared helpers live in ``tests/support`` (``tests.support.<module>``).

Under ``python -B`` (or ``PYTHONDONTWRITEBYTECODE``) the session fails if a ``__pycache__`` folder
appeared in the source tree: a test started a Python process without
``devcluster.subprocess_env``.

If the binaries can't be found or built, tests needing them are skipped with a loud reason, or
fail when ``CI=true``. Point at your own binaries with ``TOPOS_K8S_BIN`` or
``KUBEBUILDER_ASSETS`` (see docs/testing.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.register_assert_rewrite("tests.support")

from common.kube import NAMESPACES, KubeClient  # noqa: E402
from devcluster.binaries import Binaries, BinariesUnavailable, ensure  # noqa: E402
from devcluster.controlplane import ControlPlane, ControlPlaneError, ControlPlaneSettings  # noqa: E402
from tests.support.ci import in_ci  # noqa: E402

_KUBE_FIXTURES = frozenset(
    {
        "control_plane",
        "kubeconfig",
        "kube",
        "namespace",
        "kubectl",
        "k8s_binaries",
        "uncached_plane",
        "kube_scheduler_name",
        "workload_plane",
        "workload_kube",
        "workload_namespace",
        *(f"{name}_controller" for name in ("jobset", "lws", "trainer", "kuberay")),
    }
)
_unavailable: list[str] = []
_REPO = Path(__file__).resolve().parents[1]
_bytecode_before: dict[Path, int] = {}
_bytecode_written: list[Path] = []


def _bytecode_files() -> dict[Path, int]:
    """Files in the ``__pycache__`` folders of the source tree (hidden folders such as ``.venv``
    left out), with their modification times."""
    found: dict[Path, int] = {}
    for root, dirs, files in os.walk(_REPO):
        if Path(root).name == "__pycache__":
            for name in files:
                with contextlib.suppress(FileNotFoundError):  # a writer replacing it just now
                    found[Path(root, name)] = Path(root, name).stat().st_mtime_ns
        dirs[:] = [d for d in dirs if not d.startswith(".")]
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    if sys.dont_write_bytecode:
        _bytecode_before.update(_bytecode_files())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not sys.dont_write_bytecode:
        return  # this process writes bytecode itself: a child's can't be told apart
    after = _bytecode_files()
    _bytecode_written.extend(sorted(p for p, t in after.items() if _bytecode_before.get(p) != t))
    if _bytecode_written:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _KUBE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kube)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _bytecode_written:
        terminalreporter.write_sep("!", "BYTECODE WRITTEN INTO THE SOURCE TREE", red=True)
        for path in _bytecode_written:
            terminalreporter.write_line(str(path.relative_to(_REPO)))
        terminalreporter.write_line(
            "A test started Python without devcluster.subprocess_env.subprocess_env()."
        )
    if _unavailable:
        terminalreporter.write_sep("!", "KUBERNETES CONTROL-PLANE TESTS DID NOT RUN", red=True)
        terminalreporter.write_line(_unavailable[0])
        terminalreporter.write_line(
            "Build the binaries with `make k8s-binaries` (see docs/testing.md)."
        )


def _unavailable_outcome(reason: str) -> None:
    _unavailable.append(reason)
    if in_ci():
        pytest.fail(
            f"CI=true and the Kubernetes control plane is unavailable: {reason}", pytrace=False
        )
    pytest.skip(f"KUBERNETES CONTROL PLANE UNAVAILABLE: {reason}")


@pytest.fixture(scope="session")
def k8s_binaries() -> Binaries:
    try:
        return ensure()
    except BinariesUnavailable as exc:
        _unavailable_outcome(str(exc))
        raise  # unreachable: skip/fail raise


@pytest.fixture(scope="session")
def control_plane(k8s_binaries: Binaries) -> Iterator[ControlPlane]:
    try:
        plane = ControlPlane.start(binaries=k8s_binaries)
    except ControlPlaneError as exc:
        _unavailable_outcome(f"the control plane did not start: {exc}")
        raise
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube_scheduler_name(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    from devcluster.binaries import find
    from devcluster.scheduler import KubeScheduler, SchedulerError
    from tests.support.ci import skip_or_fail

    found = find(extra=True)
    if found is None or found.kube_scheduler is None:
        skip_or_fail("kube-scheduler is not built (python -m devcluster.binaries ensure --all)")
    name = f"kube-scheduler-{uuid.uuid4().hex[:6]}"
    try:
        scheduler = KubeScheduler.start(
            binary=found.kube_scheduler,
            kubeconfig=control_plane.kubeconfig,
            name=name,
            directory=tmp_path_factory.mktemp("kube-scheduler"),
        )
    except SchedulerError as exc:
        pytest.fail(str(exc), pytrace=False)
    with scheduler:
        yield name


@pytest.fixture(scope="session")
def kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig


@pytest.fixture
async def kube(kubeconfig: Path) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
async def namespace(kube: KubeClient, request: pytest.FixtureRequest) -> str:
    return await _new_namespace(kube, request)


async def _new_namespace(kube: KubeClient, request: pytest.FixtureRequest) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{stem}-{uuid.uuid4().hex[:6]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


@pytest.fixture(scope="session")
def kubectl(
    control_plane: ControlPlane, k8s_binaries: Binaries
) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(k8s_binaries.kubectl), f"--kubeconfig={control_plane.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture(scope="session")
def uncached_plane(k8s_binaries: Binaries) -> Iterator[ControlPlane]:
    """A second control plane: no watch cache, no watch lists, and the Workload API not served
    (as by default)."""
    settings = ControlPlaneSettings(
        workload_api=False,
        extra_apiserver_args=("--watch-cache=false", "--feature-gates=WatchList=false"),
    )
    try:
        plane = ControlPlane.start(binaries=k8s_binaries, settings=settings)
    except ControlPlaneError as exc:
        _unavailable_outcome(f"the uncached control plane did not start: {exc}")
        raise
    with plane:
        yield plane


@pytest.fixture(scope="session")
def workload_plane(k8s_binaries: Binaries) -> Iterator[ControlPlane]:
    from tests.support.workload_controllers import start_plane

    try:
        plane = start_plane(k8s_binaries)
    except ControlPlaneError as exc:
        _unavailable_outcome(f"the workloads' control plane did not start: {exc}")
        raise
    with plane:
        yield plane


@pytest.fixture(scope="session")
def workload_controllers(workload_plane: ControlPlane) -> Iterator[Any]:
    from tests.support.workload_controllers import WorkloadHarness

    harness = WorkloadHarness(workload_plane)
    try:
        yield harness
    finally:
        harness.stop()


def _workload_controller(name: str) -> Any:
    @pytest.fixture(scope="session", name=f"{name}_controller")
    def started(workload_controllers: Any) -> Any:
        from devcluster.workloads.launch import WorkloadsError
        from tests.support.ci import skip_or_fail

        try:
            return workload_controllers.need(name)
        except BinariesUnavailable as exc:
            skip_or_fail(f"the {name} controller cannot be built (make controllers): {exc}")
        except WorkloadsError as exc:
            pytest.fail(str(exc), pytrace=False)

    return started


jobset_controller = _workload_controller("jobset")
lws_controller = _workload_controller("lws")
trainer_controller = _workload_controller("trainer")
kuberay_controller = _workload_controller("kuberay")
kueue_controller = _workload_controller("kueue")


@pytest.fixture
async def workload_kube(workload_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(workload_plane.kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def workload_namespace(workload_kube: KubeClient, request: pytest.FixtureRequest) -> str:
    return await _new_namespace(workload_kube, request)


@pytest.fixture(autouse=True)
def _coordinators_keep_to_their_own_pods(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the shared control plane, a coordinator's scheduler must be scoped (see module doc)."""
    if request.node.get_closest_marker("kube") is None:
        return
    import coordinator.app.main
    from coordinator.app.backend import Backend
    from coordinator.app.config.sections import Config
    from coordinator.app.kube_backend import KubeBackend

    install = coordinator.app.main.install_scheduler

    def scoped(app: Any, config: Config, backend: Backend) -> None:
        section = config.scheduler
        on_kube = isinstance(backend, KubeBackend)
        if on_kube and section.enabled and not (section.namespace or section.node_selector):
            pytest.fail(
                "this test starts a coordinator on the shared control plane with a scheduler "
                "over every namespace and node: give it `scheduler: {namespace: <the test's "
                "namespace>}` (or a nodeSelector), or `enabled: false`",
                pytrace=False,
            )
        install(app, config, backend)

    monkeypatch.setattr(coordinator.app.main, "install_scheduler", scoped)


@pytest.fixture(autouse=True)
def _coordinators_elect_on_their_tests_lease(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator elects its leader on the API server by default, on a Lease in ``default``
    (outside a pod). There, each test's coordinators share a Lease of their own, so one test's
    leader — even one stopped without releasing — never holds up the next test's."""
    if request.node.get_closest_marker("kube") is None:
        return
    import coordinator.app.main
    from coordinator.app.election import DEFAULT_LEASE_NAME, LeaderElectionSettings

    elect = coordinator.app.main.elect_leader
    lease = f"{DEFAULT_LEASE_NAME}-{uuid.uuid4().hex[:8]}"

    def own_lease(app: Any, settings: LeaderElectionSettings | None, **kwargs: Any) -> Any:
        if settings is not None and (settings.namespace, settings.lease_name) == (
            "default",
            DEFAULT_LEASE_NAME,
        ):
            settings = msgspec.structs.replace(settings, lease_name=lease)
        return elect(app, settings, **kwargs)

    monkeypatch.setattr(coordinator.app.main, "elect_leader", own_lease)


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Programs run in-process (the agent, the coordinator) point the root logger at the stderr
    of the moment; put it back so later tests don't log into a capture pytest already closed."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
