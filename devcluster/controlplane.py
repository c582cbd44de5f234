"""A local Kubernetes control plane: etcd, kube-apiserver and kube-controller-manager on 127.0.0.1.

``ControlPlane.start`` generates a CA, the API server's serving certificate, an admin client
certificate (group ``system:masters``, so it may also impersonate anyone) and a service-account
signing key; starts etcd (``--unsafe-no-fsync``, data in the directory) and kube-apiserver (RBAC,
TokenRequest/TokenReview with the configured issuer and audiences) on free ports; writes an admin
kubeconfig; once ``/readyz`` answers ``ok`` and the ``default`` namespace exists it starts
kube-controller-manager with the few controllers of ``devcluster.controllers.CONTROLLERS``
(ResourceClaims from templates, Jobs, ReplicaSets, Deployments, garbage collection) and returns
when that is healthy too.

There is no scheduler or kubelet, and no other controller: namespaces stay ``Terminating`` once
deleted, no ServiceAccount tokens appear by themselves (use TokenRequest), nodes are never marked
unreachable, and the ServiceAccount admission plugin is off so pods can be created in namespaces
without a ``default`` ServiceAccount.

Directory layout (``state.json`` lets another process find and stop it):

    kubeconfig  controller-manager.kubeconfig  state.json  pki/  etcd/
    logs/{etcd,kube-apiserver,kube-controller-manager}.log
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import shutil
import ssl
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from devcluster import controllers, pki
from devcluster.binaries import KUBERNETES_VERSION, Binaries
from devcluster.processes import alive, free_port, port_in_use, spawn, stop_group

STATE_FILE = "state.json"
KUBECONFIG_FILE = "kubeconfig"
ADMIN_USER = "topos-admin"
_MANAGED = (STATE_FILE, KUBECONFIG_FILE, controllers.KUBECONFIG_FILE, "pki", "etcd", "logs")


class ControlPlaneError(Exception):
    """The control plane could not be started, found or stopped; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlPlaneSettings:
    """Knobs for ``ControlPlane.start``."""

    startup_timeout_s: float = 120.0
    """Give up if ``/readyz`` isn't ``ok`` by then (a cold start on 2 cores takes a few s)."""
    stop_grace_s: float = 10.0
    """SIGTERM, then SIGKILL after this long."""
    service_account_issuer: str = "https://kubernetes.default.svc.cluster.local"
    """``iss`` of service-account tokens."""
    api_audiences: tuple[str, ...] = ("https://kubernetes.default.svc.cluster.local", "topos")
    """Audiences the API server accepts (the first is the default for TokenRequest)."""
    service_cluster_ip_range: str = "10.0.0.0/24"
    workload_api: bool = True
    """Serve the Workload API (``scheduling.k8s.io/v1alpha2``: Workload, PodGroup, and pods'
    ``spec.schedulingGroup``): feature gates ``GenericWorkload``, ``GangScheduling`` and
    ``TopologyAwareWorkloadScheduling`` (a PodGroup's topology constraint) and its
    runtime-config. Alpha in Kubernetes 1.36, so off by default in a real cluster."""
    device_taint_rules: bool = True
    """Serve DeviceTaintRule (``resource.k8s.io/v1beta2``, KEP-5055): feature gate
    ``DRADeviceTaintRules`` (beta, off by default in Kubernetes 1.36) and its runtime-config, on
    the API server and on kube-controller-manager (whose ``device-taint-eviction-controller``
    then evicts pods from devices a rule taints ``NoExecute``)."""
    controllers: tuple[str, ...] = controllers.CONTROLLERS
    """kube-controller-manager's ``--controllers``; ``()`` runs no controller-manager (nor does
    a binaries directory without one)."""
    extra_apiserver_args: tuple[str, ...] = ()
    """Appended to kube-apiserver's command line (e.g. ``--feature-gates=…``)."""
    extra_controller_args: tuple[str, ...] = ()
    """Appended to kube-controller-manager's (e.g. ``--kube-api-qps=…``: its default 20 QPS
    holds a benchmark's claims from templates to 10 pods/s)."""
    port_attempts: int = 3
    """Start-ups retried with fresh ports if one was taken in the meantime."""


@dataclass(frozen=True, slots=True)
class ControlPlaneState:
    """What ``state.json`` records about a running control plane."""

    directory: str
    server: str
    kubeconfig: str
    kubernetes_version: str
    etcd_pid: int
    apiserver_pid: int
    etcd_port: int
    etcd_peer_port: int
    apiserver_port: int
    controller_manager_pid: int = 0
    """0: none runs."""
    controller_manager_port: int = 0

    @property
    def ports(self) -> tuple[int, ...]:
        ports = (self.etcd_port, self.etcd_peer_port, self.apiserver_port)
        return ports + ((self.controller_manager_port,) if self.controller_manager_pid else ())

    def components(self) -> tuple[tuple[int, str], ...]:
        """(pid, binary name) of each process, the order they stop in."""
        manager = ((self.controller_manager_pid, "kube-controller-manager"),)
        return (manager if self.controller_manager_pid else ()) + (
            (self.apiserver_pid, "kube-apiserver"),
            (self.etcd_pid, "etcd"),
        )


@dataclass(frozen=True, slots=True)
class _Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    controller_manager: int


class ControlPlane:
    """A running (or stopped) etcd + kube-apiserver. ``stop()`` is idempotent."""

    def __init__(
        self, state: ControlPlaneState, *, owned_directory: bool, processes: list[Any]
    ) -> None:
        self.state = state
        self._owned_directory = owned_directory
        self._processes = processes  # our own Popen children, if we started them
        self._stopped = False

    # ------------------------------------------------------------------ accessors

    @property
    def directory(self) -> Path:
        return Path(self.state.directory)

    @property
    def kubeconfig(self) -> Path:
        return Path(self.state.kubeconfig)

    @property
    def server(self) -> str:
        return self.state.server

    @property
    def ca_certificate(self) -> Path:
        return self.directory / "pki" / "ca.crt"

    def write_user_kubeconfig(self, path: Path, *, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig authenticating as ``user`` in ``groups`` by client certificate
        (for tests that need a less privileged identity than the admin)."""
        ca = pki.load_ca(self.directory / "pki")
        credentials = pki.make_client_cert(ca, user, groups)
        pki.write_kubeconfig(
            path, server=self.server, ca=ca.certificate, client=credentials, user=user
        )
        return path

    # ------------------------------------------------------------------ start

    @classmethod
    def start(
        cls,
        *,
        binaries: Binaries,
        directory: Path | None = None,
        settings: ControlPlaneSettings | None = None,
        detach: bool = False,
    ) -> ControlPlane:
        """Start and wait until ready.

        ``directory=None`` uses a fresh temporary directory, removed again by ``stop()``.
        ``detach=True`` leaves the processes running after this Python process exits (for
        ``topos devcluster up``); otherwise they are stopped at exit and, when started from the
        main thread, killed by the kernel if this process dies abruptly (even by SIGKILL).
        """
        settings = settings or ControlPlaneSettings()
        owned = directory is None
        root = Path(tempfile.mkdtemp(prefix="topos-cp-")) if directory is None else directory
        root.mkdir(parents=True, exist_ok=True)
        last_error: ControlPlaneError | None = None
        for _ in range(max(1, settings.port_attempts)):
            _clear(root)
            ports = _Ports(free_port(), free_port(), free_port(), free_port())
            if len(set(asdict(ports).values())) < 4:
                continue
            try:
                plane = cls._start_once(binaries, root, ports, settings, detach=detach, owned=owned)
            except _PortTaken as exc:
                last_error = ControlPlaneError(str(exc))
                continue
            except BaseException:
                if owned:
                    shutil.rmtree(root, ignore_errors=True)
                raise
            return plane
        if owned:
            shutil.rmtree(root, ignore_errors=True)
        raise last_error or ControlPlaneError("could not find free ports")

    @classmethod
    def _start_once(
        cls,
        binaries: Binaries,
        root: Path,
        ports: _Ports,
        settings: ControlPlaneSettings,
        *,
        detach: bool,
        owned: bool,
    ) -> ControlPlane:
        pki_dir = root / "pki"
        logs = root / "logs"
        for path in (pki_dir, logs, root / "etcd"):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        ca = pki.make_ca()
        pki.write_pair(ca, pki_dir, "ca")
        pki.write_pair(pki.make_serving_cert(ca), pki_dir, "apiserver")
        admin = pki.make_client_cert(ca, ADMIN_USER, ("system:masters",))
        pki.write_pair(admin, pki_dir, "admin")
        pki.write_pair(pki.make_signing_key(), pki_dir, "service-account", cert_suffix=".pub")
        server = f"https://127.0.0.1:{ports.apiserver}"
        kubeconfig = root / KUBECONFIG_FILE
        pki.write_kubeconfig(
            kubeconfig, server=server, ca=ca.certificate, client=admin, user=ADMIN_USER
        )

        # The kernel's parent-death signal follows the *thread* that spawned the child, so it is
        # only safe from the main thread (a worker thread may end long before the process).
        tied = not detach and threading.current_thread() is threading.main_thread()
        etcd = spawn(
            _etcd_args(binaries, root, ports), log_path=logs / "etcd.log", die_with_parent=tied
        )
        apiserver = spawn(
            _apiserver_args(binaries, root, ports, settings),
            log_path=logs / "kube-apiserver.log",
            die_with_parent=tied,
        )
        state = ControlPlaneState(
            directory=str(root),
            server=server,
            kubeconfig=str(kubeconfig),
            kubernetes_version=_binary_version(binaries),
            etcd_pid=etcd.pid,
            apiserver_pid=apiserver.pid,
            etcd_port=ports.etcd,
            etcd_peer_port=ports.etcd_peer,
            apiserver_port=ports.apiserver,
        )
        (root / STATE_FILE).write_text(json.dumps(asdict(state), indent=2) + "\n")
        plane = cls(state, owned_directory=owned, processes=[etcd, apiserver])
        if not detach:
            atexit.register(plane.stop)
        try:
            plane._wait_ready(settings.startup_timeout_s, pki_dir)
            if binaries.kube_controller_manager is not None and settings.controllers:
                plane._start_controllers(binaries.kube_controller_manager, ports, settings, tied)
        except BaseException:
            plane.stop(remove_directory=False)
            raise
        return plane

    def _start_controllers(
        self, binary: Path, ports: _Ports, settings: ControlPlaneSettings, tied: bool
    ) -> None:
        log = self.directory / "logs" / f"{controllers.LOG_NAME}.log"
        argv = controllers.args(
            binary,
            self.directory,
            server=self.server,
            port=ports.controller_manager,
            controllers=settings.controllers,
        )
        if settings.workload_api:  # its PodGroup controller (podgroup-protection) is gated too
            argv.append(WORKLOAD_API_ARGS[0])
        if settings.device_taint_rules:  # device-taint-eviction reads the rules when gated
            argv.append(DEVICE_TAINT_RULE_ARGS[0])
        argv += settings.extra_controller_args
        manager = spawn(argv, log_path=log, die_with_parent=tied)
        self._processes.append(manager)
        self.state = replace(
            self.state,
            controller_manager_pid=manager.pid,
            controller_manager_port=ports.controller_manager,
        )
        (self.directory / STATE_FILE).write_text(json.dumps(asdict(self.state), indent=2) + "\n")
        try:
            controllers.wait_healthy(
                manager, ports.controller_manager, log, settings.startup_timeout_s
            )
        except controllers.ControllersError as exc:
            if "address already in use" in controllers.tail(log):
                raise _PortTaken("kube-controller-manager: port taken while starting") from exc
            raise ControlPlaneError(str(exc)) from exc

    def _wait_ready(self, timeout_s: float, pki_dir: Path) -> None:
        context = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        context.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, process in zip(("etcd", "kube-apiserver"), self._processes, strict=True):
                if process.poll() is not None:
                    log = self.directory / "logs" / f"{name}.log"
                    tail = controllers.tail(log)
                    if "address already in use" in tail:
                        raise _PortTaken(f"{name}: port taken while starting")
                    raise ControlPlaneError(
                        f"{name} exited with status {process.returncode} while starting; "
                        f"last log lines ({log}):\n{tail}"
                    )
            status, body = _get(context, self.state.apiserver_port, "/readyz")
            if status == 200:
                status, body = _get(
                    context, self.state.apiserver_port, "/api/v1/namespaces/default"
                )
                if status == 200:
                    return
            last = f"{status} {body[:200]}"
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {timeout_s:.0f}s (last answer: {last}); "
            f"logs in {self.directory / 'logs'}"
        )

    # ------------------------------------------------------------------ find and stop

    @classmethod
    def attach(cls, directory: Path) -> ControlPlane:
        """The control plane recorded in ``directory/state.json`` (started by another process)."""
        try:
            raw = json.loads((directory / STATE_FILE).read_text())
            state = ControlPlaneState(**raw)
        except FileNotFoundError as exc:
            raise ControlPlaneError(f"no control plane recorded in {directory}") from exc
        except (OSError, ValueError, TypeError) as exc:
            raise ControlPlaneError(f"unreadable {directory / STATE_FILE}: {exc}") from exc
        return cls(state, owned_directory=False, processes=[])

    def running(self) -> bool:
        """Whether all its processes are still ours and alive."""
        return all(_is_ours(pid, name) for pid, name in self.state.components())

    def stop(self, *, remove_directory: bool = True) -> None:
        """Stop kube-controller-manager, kube-apiserver, then etcd (each a whole process group),
        and wait until their ports are free. Removes the directory's contents we created when
        ``remove_directory``."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        by_pid = {process.pid: process for process in self._processes}
        for pid, name in self.state.components():
            process = by_pid.get(pid)
            if process is None and not _is_ours(pid, name):
                continue  # gone already, or the pid now belongs to someone else
            stop_group(
                pid,
                grace_s=ControlPlaneSettings().stop_grace_s,
                reap=process.poll if process else None,
            )
        deadline = time.monotonic() + 10.0
        while any(port_in_use(port) for port in self.state.ports) and time.monotonic() < deadline:
            time.sleep(0.1)
        if remove_directory:
            if self._owned_directory:
                shutil.rmtree(self.directory, ignore_errors=True)
            else:
                _clear(self.directory)
                with contextlib.suppress(OSError):
                    self.directory.rmdir()  # only if nothing else lives there

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _PortTaken(ControlPlaneError):
    pass


def _etcd_args(binaries: Binaries, root: Path, ports: _Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binaries.etcd),
        "--name=topos",
        f"--data-dir={root / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=topos={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


#: kube-apiserver flags serving the Workload API (scheduling.k8s.io/v1alpha2, alpha in 1.36),
#: with PodGroups' ``spec.schedulingConstraints.topology`` (dropped unless its gate is on).
WORKLOAD_API_ARGS: Final = (
    "--feature-gates=GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true",
    "--runtime-config=scheduling.k8s.io/v1alpha2=true",
)

#: kube-apiserver flags serving DeviceTaintRule (resource.k8s.io/v1beta2; beta, off by default in
#: 1.36). ``DRADeviceTaints`` (taints in ResourceSlices) is beta and on by default.
DEVICE_TAINT_RULE_ARGS: Final = (
    "--feature-gates=DRADeviceTaintRules=true",
    "--runtime-config=resource.k8s.io/v1beta2/devicetaintrules=true",
)


def _apiserver_args(
    binaries: Binaries, root: Path, ports: _Ports, settings: ControlPlaneSettings
) -> list[str]:
    pki_dir = root / "pki"
    return [
        str(binaries.kube_apiserver),
        "--advertise-address=127.0.0.1",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
        f"--cert-dir={pki_dir}",
        f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
        f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
        f"--client-ca-file={pki_dir / 'ca.crt'}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={settings.service_account_issuer}",
        f"--service-account-key-file={pki_dir / 'service-account.pub'}",
        f"--service-account-signing-key-file={pki_dir / 'service-account.key'}",
        f"--api-audiences={','.join(settings.api_audiences)}",
        f"--service-cluster-ip-range={settings.service_cluster_ip_range}",
        "--disable-admission-plugins=ServiceAccount",
        "--allow-privileged=true",
        "--profiling=false",
        *(WORKLOAD_API_ARGS if settings.workload_api else ()),
        *(DEVICE_TAINT_RULE_ARGS if settings.device_taint_rules else ()),
        *settings.extra_apiserver_args,
    ]


def _get(context: ssl.SSLContext, port: int, path: str) -> tuple[int, str]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        return 0, str(exc)
    finally:
        connection.close()


def _is_ours(pid: int, name: str) -> bool:
    """``pid`` is alive and runs the binary ``name`` (guards against recycled pids)."""
    if not alive(pid):
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return Path(argv0).name == name


def _binary_version(binaries: Binaries) -> str:
    return f"v{KUBERNETES_VERSION}" if binaries.source == "cache" else "unknown"


def _clear(root: Path) -> None:
    """Remove what a previous control plane left in ``root`` (only names we create)."""
    for name in _MANAGED:
        path = root / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
