"""Client CPU per API request: aiohttp's ``ClientSession.request``, ``common.kube.http1`` and an
HTTP/2 client on ``h2``.

A bind-sized POST (headers as ``DirectTransport`` sends them, a msgspec-encoded Binding) over TLS
to a server in another process that answers every request at once with a kube-apiserver-like
``201``; ``--in-flight`` requests at once, on uvloop. Measured: this process's CPU time (user +
system) per request, after a warm-up that opens the connections. The arms:

- ``aiohttp``: ``ClientSession.request``, one kept connection per request in flight;
- ``http1``: ``Http1Pool``, the same;
- ``http1-new``: ``Http1Pool`` with every request on a new connection (its TLS session resumed, as
  the pool's new connections are): what a connection opened costs, beside ``http1``;
- ``h2``: every request a stream on one HTTP/2 connection (``benchmarks/h2_client.py``; the
  ``bench`` extra installs ``h2``, without it the arm is skipped), against a server speaking
  HTTP/2 (``h2`` too).

The last line says which share of requests would have to need a new connection for ``h2`` to cost
less than ``http1`` (the pool opens one per request in flight at its peak and keeps them a
minute). ``--apiserver``: against kube-apiserver instead (the test control plane, started here;
an Event POSTed per request, as the coordinator's Scheduled Events, with the admin's client
certificate; kube-apiserver speaks both).

    python -m benchmarks.request_cpu [--requests 4000] [--in-flight 64] [--rounds 2] [--apiserver]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import aiohttp
import msgspec
import uvloop
from yarl import URL

from common.kube.http1 import Http1Pool
from devcluster.binaries import ensure
from devcluster.controlplane import ControlPlane, ControlPlaneSettings
from devcluster.pki import make_ca, make_serving_cert

h2_client: ModuleType | None
try:
    from benchmarks import h2_client
except ImportError:  # h2 is in the bench extra only
    h2_client = None

_BODY = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}'
_SERVER = r"""
import asyncio, ssl, sys
BODY = __BODY__
REPLY = (b"HTTP/1.1 201 Created\r\nAudit-Id: 0f0b5c9e-7c53-4e43-a0a6-3b1f1e1e1e1e\r\n"
         b"Cache-Control: no-cache, private\r\nContent-Type: application/json\r\n"
         b"Date: Mon, 30 Nov 2026 01:00:00 GMT\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY
class Answer(asyncio.Protocol):
    def connection_made(self, transport): self.transport, self.buf = transport, b""
    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buf[:end].split(b"\r\n"):
                if line.lower().startswith(b"content-length:"): length = int(line[15:])
            if len(self.buf) < end + 4 + length: return
            self.buf = self.buf[end + 4 + length:]
            self.transport.write(REPLY)
async def main():
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(sys.argv[1], sys.argv[2])
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", 0, ssl=tls)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
""".replace("__BODY__", repr(_BODY))


_H2_SERVER = r"""
import asyncio, ssl, sys
import h2.config, h2.connection, h2.events
BODY = __BODY__
HEADERS = [(b":status", b"201"), (b"audit-id", b"0f0b5c9e-7c53-4e43-a0a6-3b1f1e1e1e1e"),
           (b"cache-control", b"no-cache, private"), (b"content-type", b"application/json"),
           (b"date", b"Mon, 30 Nov 2026 01:00:00 GMT"), (b"content-length", b"%d" % len(BODY))]
class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()
        transport.write(self.h2.data_to_send())
    def data_received(self, data):
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.h2.send_headers(event.stream_id, HEADERS)
                self.h2.send_data(event.stream_id, BODY, end_stream=True)
        self.transport.write(self.h2.data_to_send())
async def main():
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(sys.argv[1], sys.argv[2])
    tls.set_alpn_protocols(["h2"])
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", 0, ssl=tls)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
""".replace("__BODY__", repr(_BODY))


def _binding(i: int) -> tuple[str, bytes]:
    body = msgspec.json.encode(
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": f"p-{i:05d}",
                "namespace": "bench",
                "uid": "0f0b5c9e-7c53-4e43-a0a6-3b1f1e1e1e1e",
                "annotations": {"topos.io/placement": "node-1"},
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
        }
    )
    return f"/api/v1/namespaces/bench/pods/p-{i:05d}/binding", body


def _event(i: int) -> tuple[str, bytes]:
    """A Scheduled Event as the coordinator writes one (a new name each: the server stores it)."""
    pod = f"p-{i:06d}"
    body = msgspec.json.encode(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod}.{time.time_ns():x}", "namespace": "default"},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod,
                "namespace": "default",
                "uid": "0f0b5c9e-7c53-4e43-a0a6-3b1f1e1e1e1e",
            },
            "reason": "Scheduled",
            "message": f"Successfully assigned default/{pod} to node-1",
            "type": "Normal",
            "source": {"component": "topos"},
            "reportingComponent": "topos",
            "reportingInstance": "topos-1",
            "firstTimestamp": "2026-11-30T19:00:00Z",
            "lastTimestamp": "2026-11-30T19:00:00Z",
            "count": 1,
        }
    )
    return "/api/v1/namespaces/default/events", body


_HEADERS = {
    "User-Agent": "OpenAPI-Generator/32.0.0/python",
    "Content-Type": "application/json",
    "Accept": "application/json",
    "authorization": "Bearer " + "t" * 40,
}


@dataclass(frozen=True)
class _Server:
    """Where the arms send: ports for HTTP/1.1 and HTTP/2 (one where the server speaks both),
    the CA, a client certificate if the server asks for one, and the request to send."""

    http1_port: int
    h2_port: int | None
    ca: Path
    client: tuple[Path, Path] | None
    request: Callable[[int], tuple[str, bytes]]
    headers: Mapping[str, str]


async def _measure(send: Callable[[int], Awaitable[None]], requests: int, in_flight: int) -> float:
    slots = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with slots:
            await send(i)

    await asyncio.gather(*(one(i) for i in range(4 * in_flight)))  # connections opened
    began = time.process_time()
    await asyncio.gather(*(one(i) for i in range(requests)))
    return (time.process_time() - began) / requests * 1e6


def _tls(server: _Server, alpn: list[str]) -> ssl.SSLContext:
    tls = ssl.create_default_context(cafile=str(server.ca))
    if server.client is not None:
        tls.load_cert_chain(*map(str, server.client))
    tls.set_alpn_protocols(alpn)
    return tls


async def _run(server: _Server, requests: int, in_flight: int, rounds: int) -> None:
    port, headers = server.http1_port, dict(server.headers)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=_tls(server, ["http/1.1"]), limit=0), trust_env=False
    )
    timeout = aiohttp.ClientTimeout(total=30)
    tls = _tls(server, ["http/1.1"])
    pool = Http1Pool("127.0.0.1", port, authority=f"127.0.0.1:{port}", tls=tls)
    fresh = Http1Pool("127.0.0.1", port, authority=f"127.0.0.1:{port}", tls=tls, keepalive_s=0)
    h2 = None
    if h2_client is not None and server.h2_port is not None:
        authority = f"127.0.0.1:{server.h2_port}"
        h2 = await h2_client.connect(
            "127.0.0.1", server.h2_port, _tls(server, ["h2"]), authority=authority
        )

    async def via_aiohttp(i: int) -> None:
        path, body = server.request(i)
        url = URL.build(scheme="https", authority=f"127.0.0.1:{port}", path=path, encoded=True)
        response = await session.request("POST", url, headers=headers, data=body, timeout=timeout)
        await response.read()
        response.release()
        assert response.status == 201, response.status

    def via(pool: Http1Pool) -> Callable[[int], Awaitable[None]]:
        async def send(i: int) -> None:
            path, body = server.request(i)
            reply = await pool.exchange("POST", path, headers, body, timeout_s=30)
            assert reply.status == 201, (reply.status, reply.body[:200])

        return send

    async def via_h2(i: int) -> None:
        assert h2 is not None
        path, body = server.request(i)
        status, reply = await h2.exchange("POST", path, headers, body)
        assert status == 201, (status, reply[:200])

    arms: dict[str, Callable[[int], Awaitable[None]]] = {
        "aiohttp": via_aiohttp,
        "http1": via(pool),
        "http1-new": via(fresh),
    }
    if h2 is not None:
        arms["h2"] = via_h2
    else:
        print("h2 not installed (pip install -e '.[bench]'): the HTTP/2 arm skipped")
    costs: dict[str, list[float]] = {name: [] for name in arms}
    try:
        for r in range(rounds):
            for name, send in arms.items():
                us = await _measure(send, requests, in_flight)
                costs[name].append(us)
                print(f"round {r + 1} {name:9s} {us:6.1f} µs CPU per request", flush=True)
    finally:
        await session.close()
        await pool.close()
        await fresh.close()
        if h2 is not None:
            h2.close()
    if h2 is not None:
        kept, new, multiplexed = (statistics.median(costs[n]) for n in ("http1", "http1-new", "h2"))
        if multiplexed <= kept:
            print(
                f"h2 costs less per request than http1 on kept connections ({multiplexed:.1f} µs)"
            )
        else:
            share = (multiplexed - kept) / (new - kept) if new > kept else float("inf")
            print(
                f"medians: http1 {kept:.1f}, http1-new {new:.1f}, h2 {multiplexed:.1f} µs: h2 "
                f"costs less than the pool only where over {share:.0%} of requests open a "
                "connection"
            )


def _start(script: str, work: Path) -> tuple[subprocess.Popen[str], int]:
    argv = [sys.executable, "-c", script, str(work / "tls.crt"), str(work / "tls.key")]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    return server, int(server.stdout.readline())


@contextlib.contextmanager
def apiserver_target() -> Iterator[_Server]:
    """The test control plane's kube-apiserver (started here, stopped after), as a target for
    Events in the default namespace with the admin's client certificate."""
    plane = ControlPlane.start(
        binaries=ensure(log=False), settings=ControlPlaneSettings(controllers=())
    )
    try:
        port = int(plane.server.rsplit(":", 1)[1])
        pki = plane.directory / "pki"
        yield _Server(
            port,
            port,
            pki / "ca.crt",
            (pki / "admin.crt", pki / "admin.key"),
            _event,
            {k: v for k, v in _HEADERS.items() if k != "authorization"},
        )
    finally:
        plane.stop()


def _against_apiserver(args: argparse.Namespace) -> None:
    with apiserver_target() as server:
        print(f"load {os.getloadavg()[0]:.1f}, {args.in_flight} in flight, uvloop, kube-apiserver")
        uvloop.run(_run(server, args.requests, args.in_flight, args.rounds))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--apiserver", action="store_true", help="against kube-apiserver")
    args = parser.parse_args(argv)
    if args.apiserver:
        _against_apiserver(args)
        return
    with tempfile.TemporaryDirectory(prefix="topos-request-cpu-") as scratch:
        work = Path(scratch)
        ca = make_ca()
        serving = make_serving_cert(ca)
        (work / "ca.crt").write_bytes(ca.certificate)
        (work / "tls.crt").write_bytes(serving.certificate)
        (work / "tls.key").write_bytes(serving.key)
        servers = [_start(_SERVER, work)]
        try:
            if h2_client is not None:
                servers.append(_start(_H2_SERVER, work))
            h2_port = servers[1][1] if len(servers) > 1 else None
            server = _Server(servers[0][1], h2_port, work / "ca.crt", None, _binding, _HEADERS)
            print(f"load {os.getloadavg()[0]:.1f}, {args.in_flight} in flight, uvloop")
            uvloop.run(_run(server, args.requests, args.in_flight, args.rounds))
        finally:
            for process, _ in servers:
                process.terminate()
                process.wait(10)


if __name__ == "__main__":
    main()
