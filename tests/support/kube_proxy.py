"""A counting HTTP proxy in front of the test API server.

The agent talks plain HTTP to the proxy; the proxy forwards each request to the real
kube-apiserver over TLS with the admin client certificate and records ``(method, path)``. Counting
here is counting the HTTP requests the agent really sent.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "authorization"}


@dataclass
class CountingProxy:
    url: str
    requests: list[tuple[str, str]] = field(default_factory=list)

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p in self.requests if m == method and p == path)

    def write_kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "anyone", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "anyone"}}],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        return path


def _ssl_from_kubeconfig(kubeconfig: Path, scratch: Path) -> tuple[str, ssl.SSLContext]:
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    ca = scratch / "ca.crt"
    cert = scratch / "client.crt"
    key = scratch / "client.key"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    return cluster["server"], context


@asynccontextmanager
async def counting_proxy(kubeconfig: Path) -> AsyncIterator[CountingProxy]:
    with tempfile.TemporaryDirectory() as scratch:
        upstream, context = _ssl_from_kubeconfig(kubeconfig, Path(scratch))
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
        proxy = CountingProxy(url="")

        async def forward(request: web.Request) -> web.StreamResponse:
            proxy.requests.append((request.method, request.path))
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
            async with session.request(
                request.method,
                upstream + request.path_qs,
                headers=headers,
                data=await request.read(),
            ) as reply:
                body = await reply.read()
                out = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_HEADERS}
                out.pop("Content-Encoding", None)
                return web.Response(status=reply.status, body=body, headers=out)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        proxy.url = f"http://127.0.0.1:{port}"
        try:
            yield proxy
        finally:
            await runner.cleanup()
            await session.close()
