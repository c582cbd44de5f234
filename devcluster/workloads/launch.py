"""Run workload controllers against a control plane, each as its project ships it, reached on
loopback.

For each controller (requirements first) :func:`start`:

1. generates a CA of its own and a serving certificate for ``127.0.0.1`` (``devcluster.pki``),
   written where controller-runtime looks by default (``$TMPDIR/k8s-webhook-server/
   serving-certs``, ``$TMPDIR`` a directory of the controller's own);
2. writes a kubeconfig (client certificate, user ``topos-workloads:<name>``) and its
   configuration file from the catalog's template: leader election off, its own certificate
   management off, health/metrics/webhook on free 127.0.0.1 ports;
3. installs its CRDs from its module (and waits until they are Established), the namespaces
   and certificate Secret it needs, and its webhook configurations, pointed at
   ``https://127.0.0.1:<webhook port>`` with its CA as ``caBundle``;
4. starts it and waits until ``/readyz`` answers ok and its webhook server answers TLS with the
   certificate the API server will verify;
5. installs the module's other objects (Trainer's ``torch-distributed`` runtime), which its own
   webhooks vet.

A controller that does not come up is started once more; one that still does not takes down
what the same call started and the webhook configurations it installed (see
:func:`start_built`).

The processes are recorded in ``<directory>/state.json`` so another process (``topos devcluster
down``) can stop them; logs are ``<directory>/<name>/<name>.log``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from common.kube import AlreadyExists, KubeClient, NotFound
from common.kube.resources import Resource
from devcluster import crds, pki
from devcluster.binaries import BinariesUnavailable
from devcluster.controllers import tail
from devcluster.controlplane import ControlPlane
from devcluster.processes import alive, free_port, spawn, stop_group
from devcluster.workloads import build, manifests
from devcluster.workloads.catalog import Controller, with_requirements

STATE_FILE: Final = "state.json"
CERT_SUBDIR: Final = Path("tmp") / "k8s-webhook-server" / "serving-certs"
_KNOWN: Final = {
    "Namespace": Resource("", "v1", "namespaces", False, "Namespace"),
    "Secret": Resource("", "v1", "secrets", True, "Secret"),
    "CustomResourceDefinition": crds.CRDS,
    "MutatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        False,
        "MutatingWebhookConfiguration",
    ),
    "ValidatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        False,
        "ValidatingWebhookConfiguration",
    ),
}


class WorkloadsError(Exception):
    """A controller could not be built, installed or started; the message names it and says
    why (with its last log lines when it ran)."""


class NotReady(WorkloadsError):
    """A controller that exited while starting, or was not ready in time: ``headline`` says
    which and how; the message adds the error lines and the last lines of its log."""

    def __init__(self, headline: str, log: Path) -> None:
        self.headline = headline
        errors = _error_lines(log)
        shown = f"\nits errors:\n{errors}" if errors else ""
        super().__init__(f"{headline}{shown}\nlast log lines ({log}):\n{tail(log, 20)}")


def _error_lines(log: Path, most: int = 8) -> str:
    """The last ``most`` error lines of a controller's log (zap's JSON ``"level":"error"``,
    klog's ``E<date>``), each cut to 500 characters: why a manager stopped is there, often
    before the shutdown lines that end the log."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    found = [
        line[:500]
        for line in lines
        if '"level":"error"' in line or (line[:1] == "E" and line[1:5].isdigit())
    ]
    return "\n".join(found[-most:])


@dataclass(frozen=True, slots=True)
class Process:
    """One running controller, as recorded in ``state.json``."""

    name: str
    version: str
    pid: int
    health_port: int
    metrics_port: int
    webhook_port: int
    log: str


@dataclass(frozen=True, slots=True)
class _Ports:
    health: int
    metrics: int
    webhook: int


class WorkloadControllers:
    """Controllers started by :func:`start`; ``stop()`` is idempotent."""

    def __init__(
        self, directory: Path, processes: list[Process], children: Sequence[Any] = ()
    ) -> None:
        self.directory = directory
        self.processes = processes
        self._children = {child.pid: child for child in children}
        self._stopped = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.processes)

    def summary(self) -> str:
        started = ", ".join(f"{p.name} {p.version}" for p in self.processes)
        return f"devcluster: workload controllers {started} (logs: {self.directory}/<name>/)"

    def stop(self) -> None:
        """Stop every controller (reverse order), each a whole process group."""
        if self._stopped:
            return
        self._stopped = True
        for process in reversed(self.processes):
            child = self._children.get(process.pid)
            if child is None and not _is_ours(process):
                continue
            stop_group(process.pid, grace_s=10.0, reap=child.poll if child else None)

    @classmethod
    def attach(cls, directory: Path) -> WorkloadControllers | None:
        """The controllers recorded in ``directory`` (``None`` if none were)."""
        try:
            raw = json.loads((directory / STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise WorkloadsError(f"unreadable {directory / STATE_FILE}: {exc}") from exc
        return cls(directory, [Process(**p) for p in raw["processes"]])

    def _record(self) -> None:
        state = {"processes": [asdict(p) for p in self.processes]}
        (self.directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def kube_controllers(names: Iterable[str]) -> tuple[str, ...]:
    """The kube-controller-manager controllers ``names`` need (Jobs, StatefulSets)."""
    needed: list[str] = []
    for controller in with_requirements(list(names)):
        needed += [c for c in controller.kube_controllers if c not in needed]
    return tuple(needed)


def start(
    plane: ControlPlane,
    names: Sequence[str],
    *,
    directory: Path | None = None,
    detach: bool = False,
    running_already: Collection[str] = (),
    timeout_s: float = 180.0,
    log: bool = True,
) -> WorkloadControllers:
    """Build (if not cached), install and start ``names`` and what they require on ``plane``
    (but those in ``running_already``); return once every one is ready. ``detach``: the
    processes outlive this one (``devcluster up``). Blocking: call it from synchronous code,
    not on a running event loop. See :func:`start_built` for what a failure leaves."""
    builds = []
    for controller in with_requirements(list(names)):
        if controller.name in running_already:
            continue
        try:
            builds.append(build.ensure(controller, log=log))
        except BinariesUnavailable as exc:
            raise WorkloadsError(f"{controller.name}: cannot build: {exc}") from exc
    return start_built(plane, builds, directory=directory, detach=detach, timeout_s=timeout_s)


def start_built(
    plane: ControlPlane,
    builds: Sequence[build.Built],
    *,
    directory: Path | None = None,
    detach: bool = False,
    timeout_s: float = 180.0,
    attempts: int = 2,
) -> WorkloadControllers:
    """Install and start ``builds`` in order; return once every one is ready.

    A controller that exits or is not ready within ``timeout_s`` is started again, up to
    ``attempts`` times in all (a controller manager can die at start on a loaded machine: a
    cache that did not sync within its own timeout, a port taken meanwhile); each retry is said
    on stderr. A failure that remains stops what this call started and removes the webhook
    configurations it installed (they would send every later request for those kinds to a
    port nobody listens on: ``failurePolicy: Fail`` refuses them all), then raises
    ``WorkloadsError`` naming the controller, why, and the error lines of its log."""
    root = directory if directory is not None else plane.directory / "workloads"
    root.mkdir(parents=True, exist_ok=True)
    tied = not detach and threading.current_thread() is threading.main_thread()
    running = WorkloadControllers(root, [])
    webhooks: set[tuple[str, str]] = set()  # (kind, name) of those installed
    try:
        for built in builds:
            for attempt in range(1, attempts + 1):
                try:
                    process, child = _start_one(
                        plane, built, root, tied=tied, timeout_s=timeout_s, installed=webhooks
                    )
                    break
                except NotReady as exc:
                    if attempt == attempts:
                        raise
                    print(f"workloads: {exc}\nworkloads: starting it again", file=sys.stderr)
                except manifests.ManifestError as exc:
                    raise WorkloadsError(f"{built.controller.name}: {exc}") from exc
            running.processes.append(process)
            running._children[child.pid] = child
            running._record()
    except BaseException:
        running.stop()
        asyncio.run(_remove(plane.kubeconfig, webhooks))
        raise
    return running


def _start_one(
    plane: ControlPlane,
    built: build.Built,
    root: Path,
    *,
    tied: bool,
    timeout_s: float,
    installed: set[tuple[str, str]],
) -> tuple[Process, subprocess.Popen[bytes]]:
    """Install and start one controller; ``installed`` gains its webhook configurations'
    kinds and names before they are put. ``NotReady`` if it exits or is not ready in
    ``timeout_s``."""
    controller = built.controller
    home = root / controller.name
    if home.exists():
        shutil.rmtree(home)
    cert_dir = home / CERT_SUBDIR
    cert_dir.mkdir(parents=True)
    ca, serving = _certificates(controller)
    pki.write_pair(serving, cert_dir, "tls")
    (cert_dir / "ca.crt").write_bytes(ca.certificate)
    kubeconfig = plane.write_user_kubeconfig(
        home / "kubeconfig", user=f"topos-workloads:{controller.name}", groups=("system:masters",)
    )
    ports = _Ports(free_port(), free_port(), free_port())
    values = {
        "kubeconfig": kubeconfig,
        "config": home / "config.yaml",
        "health_port": ports.health,
        "metrics_port": ports.metrics,
        "webhook_port": ports.webhook,
        "cert_dir": cert_dir,
    }
    if controller.config is not None:
        (home / "config.yaml").write_text(controller.config.format(**values))
    argv = [str(built.binary), *(arg.format(**values) for arg in controller.args)]
    webhooks = manifests.webhook_configurations(
        controller, built.module, port=ports.webhook, ca=ca.certificate
    )
    definitions = manifests.crds(controller, built.module, port=ports.webhook, ca=ca.certificate)
    installed.update((str(w["kind"]), str(w["metadata"]["name"])) for w in webhooks)
    asyncio.run(_install(plane.kubeconfig, controller, definitions, webhooks, ca, serving))
    if controller.cert_secret is not None:
        _ensure_exists(Path(controller.cert_secret.mounted_check), serving.certificate)
    for mounted in controller.mounted_certs:
        if not (Path(mounted) / "tls.crt").exists():
            _ensure_exists(Path(mounted) / "tls.key", serving.key)
            _ensure_exists(Path(mounted) / "tls.crt", serving.certificate)
    log = home / f"{controller.name}.log"
    child = spawn(
        argv,
        log_path=log,
        die_with_parent=tied,
        env=_environment(home / "tmp"),
        cwd=home,
    )
    process = Process(
        name=controller.name,
        version=controller.version,
        pid=child.pid,
        health_port=ports.health,
        metrics_port=ports.metrics,
        webhook_port=ports.webhook,
        log=str(log),
    )
    try:
        failure = _wait_ready(child, ports, cert_dir / "ca.crt", bool(webhooks), timeout_s)
        if failure is not None:
            raise NotReady(f"{controller.name} {controller.version} {failure}", log)
        asyncio.run(_install_objects(plane.kubeconfig, controller, built, definitions))
    except BaseException:
        stop_group(child.pid, grace_s=5.0, reap=child.poll)
        raise
    return process, child


def _certificates(controller: Controller) -> tuple[pki.KeyPair, pki.KeyPair]:
    secret = controller.cert_secret
    name = f"topos-{controller.name}-webhook-ca"
    ca = pki.make_ca(name, dns=(secret.ca_name,), rsa_pkcs1=True) if secret else pki.make_ca(name)
    dns = ("localhost",) + ((secret.dns_name,) if secret else ())
    serving = pki.make_server_cert(ca, f"{controller.name}-webhook", ips=("127.0.0.1",), dns=dns)
    return ca, serving


def _environment(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = str(tmp)
    env.pop("KUBECONFIG", None)
    return env


def _ensure_exists(path: Path, content: bytes) -> None:
    """Create ``path`` (atomically) unless it exists; what is there already stays."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{time.monotonic_ns()}")
    staged.write_bytes(content)
    with contextlib.suppress(FileExistsError):  # another run made it meanwhile
        path.hardlink_to(staged)
    staged.unlink(missing_ok=True)


async def _install(
    kubeconfig: Path,
    controller: Controller,
    definitions: list[manifests.Document],
    webhooks: list[manifests.Document],
    ca: pki.KeyPair,
    serving: pki.KeyPair,
) -> None:
    async with await KubeClient.connect(kubeconfig) as kube:
        for namespace in controller.namespaces:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            with contextlib.suppress(AlreadyExists):
                await kube.create(_KNOWN["Namespace"], body)
        if controller.cert_secret is not None:
            await _put(kube, _cert_secret(controller, ca, serving), controller.name)
        for crd in definitions:
            await _put(kube, crd, controller.name)
        try:
            await crds.established(kube, [str(c["metadata"]["name"]) for c in definitions])
        except crds.CrdError as exc:
            raise WorkloadsError(f"{controller.name}: CRDs {exc}") from exc
        for webhook in webhooks:
            await _put(kube, webhook, controller.name)


async def _install_objects(
    kubeconfig: Path,
    controller: Controller,
    built: build.Built,
    definitions: Sequence[manifests.Document],
) -> None:
    documents = manifests.objects(controller, built.module)
    if not documents:
        return
    async with await KubeClient.connect(kubeconfig) as kube:
        for document in documents:
            await _put(kube, document, controller.name, definitions=definitions)


def _cert_secret(
    controller: Controller, ca: pki.KeyPair, serving: pki.KeyPair
) -> manifests.Document:
    secret = controller.cert_secret
    assert secret is not None

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret.name, "namespace": secret.namespace},
        "data": {
            "ca.crt": b64(ca.certificate),
            "ca.key": b64(ca.key),
            "tls.crt": b64(serving.certificate),
            "tls.key": b64(serving.key),
        },
    }


def resource_for(
    document: manifests.Document, definitions: Sequence[manifests.Document] = ()
) -> Resource:
    """The API resource of ``document``: a kind the harness knows, or one of ``definitions``
    (the controller's own CRDs)."""
    kind = str(document.get("kind"))
    if kind in _KNOWN:
        return _KNOWN[kind]
    api_version = str(document.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    for crd in definitions:
        spec = crd["spec"]
        if spec["names"]["kind"] == kind and spec["group"] == group:
            return Resource(
                group, version, spec["names"]["plural"], spec["scope"] == "Namespaced", kind
            )
    raise WorkloadsError(f"no API resource known for kind {kind!r} ({api_version})")


async def _put(
    kube: KubeClient,
    document: manifests.Document,
    owner: str,
    *,
    definitions: Sequence[manifests.Document] = (),
) -> None:
    """Create, or replace what is there (a re-run, another control plane's leftovers)."""
    resource = resource_for(document, definitions)
    metadata = document["metadata"]
    name = str(metadata["name"])
    namespace = metadata.get("namespace") if resource.namespaced else None
    try:
        await kube.create(resource, document, namespace=namespace)
        return
    except AlreadyExists:
        pass
    except Exception as exc:  # the API server's refusal, with its reason
        raise WorkloadsError(f"{owner}: {document['kind']} {name} refused: {exc}") from exc
    try:
        current = await kube.get(resource, name, namespace=namespace)
        body = dict(
            document,
            metadata=dict(metadata, resourceVersion=current["metadata"]["resourceVersion"]),
        )
        await kube.replace(resource, name, body, namespace=namespace)
    except NotFound:
        await kube.create(resource, document, namespace=namespace)


def _wait_ready(
    child: subprocess.Popen[bytes], ports: _Ports, ca: Path, webhooks: bool, timeout_s: float
) -> str | None:
    """``None`` once ``/readyz`` answers 200 and (with ``webhooks``) the webhook server answers
    TLS verified by ``ca`` for 127.0.0.1; otherwise why not, in a few words."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    context = ssl.create_default_context(cafile=str(ca))
    while time.monotonic() < deadline:
        code = child.poll()
        if code is not None:
            return f"exited with status {code} while starting"
        status, body = _get(http.client.HTTPConnection("127.0.0.1", ports.health, timeout=5))
        if status == 200 and not webhooks:
            return None
        if status == 200:
            status, body = _get(
                http.client.HTTPSConnection("127.0.0.1", ports.webhook, context=context, timeout=5)
            )
            if status:
                return None
            last = f"webhook server: {body[:200]}"
        else:
            last = f"/readyz: {status or ''} {body[:200]}"
        time.sleep(0.2)
    return f"not ready after {timeout_s:.0f}s (last answer: {last})"


def _get(connection: http.client.HTTPConnection) -> tuple[int, str]:
    try:
        connection.request("GET", "/readyz")
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        return 0, str(exc)
    finally:
        connection.close()


async def _remove(kubeconfig: Path, webhooks: Collection[tuple[str, str]]) -> None:
    """Delete the webhook configurations ``webhooks`` (kind, name) where they still are; what
    cannot be deleted is said on stderr, not raised (the failure being cleaned up after matters
    more)."""
    if not webhooks:
        return
    try:
        async with await KubeClient.connect(kubeconfig) as kube:
            for kind, name in sorted(webhooks):
                try:
                    await kube.delete(_KNOWN[kind], name)
                except NotFound:
                    pass
                except Exception as exc:
                    print(f"workloads: {kind} {name} left installed: {exc}", file=sys.stderr)
    except Exception as exc:
        print(f"workloads: webhook configurations left installed: {exc}", file=sys.stderr)


def _is_ours(process: Process) -> bool:
    if not alive(process.pid):
        return False
    try:
        argv0 = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return Path(argv0).name == process.name


def stop_recorded(directory: Path) -> bool:
    """Stop the controllers recorded in ``directory`` (``devcluster down``); whether any were."""
    running = WorkloadControllers.attach(directory)
    if running is None:
        return False
    running.stop()
    (directory / STATE_FILE).unlink(missing_ok=True)
    return True
