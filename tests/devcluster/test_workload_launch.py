"""``devcluster.workloads.launch`` when a controller does not come up, on the real control plane.

The controllers here are small stand-ins (a Python script serving ``/readyz`` and TLS on the
webhook port from the harness's certificate), because what is tested is the harness's
contract around any controller: one that dies at start is started again, and one that keeps
dying takes down what the same call started *and* its webhook configurations — left
installed with ``failurePolicy: Fail``, they would refuse every later request for their kinds
(a dead Kueue once failed every LeaderWorkerSet and JobSet test after it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from common.kube import KubeClient, NotFound, Resource
from devcluster.controlplane import ControlPlane
from devcluster.processes import alive
from devcluster.workloads import launch
from devcluster.workloads.build import Built
from devcluster.workloads.catalog import Controller, Webhooks

pytestmark = pytest.mark.kube

CONFIG_MAPS = Resource("", "v1", "configmaps", True, "ConfigMap")
VALIDATING = launch._KNOWN["ValidatingWebhookConfiguration"]

FAKE_MANAGER = """\
import http.server, json, os, pathlib, ssl, sys, threading
args = dict((a[2:] + "=").split("=")[:2] for a in sys.argv[1:])
marker = args.get("fail-first")
if "fail" in args or (marker and not os.path.exists(marker)):
    if marker:
        pathlib.Path(marker).touch()
    zap = {"separators": (",", ":")}  # as zap writes JSON
    print(json.dumps({"level": "info", "msg": "Starting manager"}, **zap))
    print(json.dumps({"level": "error", "msg": "Could not run manager",
                      "error": "failed to wait for clusterqueue caches to sync"}, **zap))
    print(json.dumps({"level": "info", "msg": "Stopping and waiting for webhooks"}, **zap))
    sys.stdout.flush()
    sys.exit(1)

class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_):
        pass

health = http.server.ThreadingHTTPServer(("127.0.0.1", int(args["health"])), Ok)
if "webhook" in args:
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", int(args["webhook"])), Ok)
    certs = pathlib.Path(os.environ["TMPDIR"]) / "k8s-webhook-server" / "serving-certs"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    hook.socket = context.wrap_socket(hook.socket, server_side=True)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
health.serve_forever()
"""


def fake(tmp_path: Path, name: str, *args: str, namespace: str | None = None) -> Built:
    """A stand-in controller ``name``; with ``namespace``, a validating webhook (``Fail``) on
    every ConfigMap created there."""
    directory = tmp_path / name
    (directory / "module").mkdir(parents=True)
    binary = directory / name
    binary.write_text(f"#!{sys.executable}\n{FAKE_MANAGER}")
    binary.chmod(0o755)
    webhooks: tuple[Webhooks, ...] = ()
    if namespace is not None:
        configuration = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": f"{namespace}-{name}"},
            "webhooks": [
                {
                    "name": "vconfigmap.topos.test",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "clientConfig": {"service": {"name": name, "path": "/validate"}},
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                }
            ],
        }
        (directory / "module" / "webhooks.yaml").write_text(json.dumps(configuration))
        webhooks = (Webhooks("webhooks.yaml"),)
    controller = Controller(
        name=name,
        module=f"example.com/{name}",
        version="v0.0.1",
        main=".",
        crds=(),
        webhooks=webhooks,
        args=("--health={health_port}", "--webhook={webhook_port}", *args),
    )
    return Built(controller, directory)


async def config_map(kube: KubeClient, namespace: str, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    await kube.create(CONFIG_MAPS, body, namespace=namespace)


async def test_a_controller_that_dies_at_start_is_started_again_and_its_webhook_served(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    flaky = fake(tmp_path, "flaky", f"--fail-first={tmp_path / 'failed-once'}", namespace=namespace)
    running = await asyncio.to_thread(
        launch.start_built, control_plane, [flaky], directory=tmp_path / "run", timeout_s=30
    )
    try:
        (process,) = running.processes
        assert alive(process.pid)
        said = capsys.readouterr().err
        assert "flaky v0.0.1 exited with status 1 while starting" in said
        assert "failed to wait for clusterqueue caches to sync" in said
        assert "starting it again" in said
        # The webhook the API server calls is the second process's.
        configuration = await kube.get(VALIDATING, f"{namespace}-flaky")
        url = configuration["webhooks"][0]["clientConfig"]["url"]
        assert url == f"https://127.0.0.1:{process.webhook_port}/validate"
    finally:
        running.stop()
        await kube.delete(VALIDATING, f"{namespace}-flaky")


async def test_a_controller_that_never_starts_takes_down_what_came_up_with_it_and_its_webhooks(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    steady = fake(tmp_path, "steady", namespace=namespace)
    broken = fake(tmp_path, "broken", "--fail", namespace=namespace)
    with pytest.raises(launch.WorkloadsError) as failed:
        await asyncio.to_thread(
            launch.start_built,
            control_plane,
            [steady, broken],
            directory=tmp_path / "run",
            timeout_s=30,
        )
    message = str(failed.value)
    assert message.startswith("broken v0.0.1 exited with status 1 while starting")
    # Why the manager stopped is named, though shutdown lines follow it in the log.
    assert "its errors:\n" in message
    assert "failed to wait for clusterqueue caches to sync" in message
    # The controller that had come up is stopped ...
    (started,) = json.loads((tmp_path / "run" / launch.STATE_FILE).read_text())["processes"]
    assert started["name"] == "steady"
    assert not alive(started["pid"])
    # ... and neither one's webhook is left to refuse ConfigMaps to a port nobody serves.
    for name in ("steady", "broken"):
        with pytest.raises(NotFound):
            await kube.get(VALIDATING, f"{namespace}-{name}")
    await config_map(kube, namespace, "after-the-failure")
