"""Client CPU per API request: aiohttp's ``ClientSession.request`` against ``common.kube.http1``.

A bind-sized POST (headers as ``DirectTransport`` sends them, a msgspec-encoded Binding) over TLS
to a server in another process that answers every request at once with a kube-apiserver-like
``201``; ``--in-flight`` requests at once, each on its own kept connection, on uvloop. Measured:
this process's CPU time (user + system) per request, after a warm-up that opens the connections.

    python -m benchmarks.request_cpu [--requests 4000] [--in-flight 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import msgspec
import uvloop
from yarl import URL

from common.kube.http1 import Http1Pool
from devcluster.pki import make_ca, make_serving_cert

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


def _binding(i: int) -> bytes:
    return msgspec.json.encode(
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


_HEADERS = {
    "User-Agent": "OpenAPI-Generator/32.0.0/python",
    "Content-Type": "application/json",
    "Accept": "application/json",
    "authorization": "Bearer " + "t" * 40,
}


async def _measure(send: Callable[[int], Awaitable[None]], requests: int, in_flight: int) -> float:
    slots = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with slots:
            await send(i)

    await asyncio.gather(*(one(i) for i in range(4 * in_flight)))  # connections opened
    began = time.process_time()
    await asyncio.gather(*(one(i) for i in range(requests)))
    return (time.process_time() - began) / requests * 1e6


async def _run(port: int, ca: Path, requests: int, in_flight: int, rounds: int) -> None:
    tls = ssl.create_default_context(cafile=str(ca))
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=tls, limit=0), trust_env=False
    )
    timeout = aiohttp.ClientTimeout(total=30)
    pool = Http1Pool("127.0.0.1", port, authority=f"127.0.0.1:{port}", tls=tls)

    async def via_aiohttp(i: int) -> None:
        url = URL.build(
            scheme="https",
            authority=f"127.0.0.1:{port}",
            path=f"/api/v1/namespaces/bench/pods/p-{i:05d}/binding",
            encoded=True,
        )
        response = await session.request(
            "POST", url, headers=dict(_HEADERS), data=_binding(i), timeout=timeout
        )
        await response.read()
        response.release()

    async def via_pool(i: int) -> None:
        target = f"/api/v1/namespaces/bench/pods/p-{i:05d}/binding"
        await pool.exchange("POST", target, dict(_HEADERS), _binding(i), timeout_s=30)

    try:
        for r in range(rounds):
            for name, send in (("aiohttp", via_aiohttp), ("http1", via_pool)):
                us = await _measure(send, requests, in_flight)
                print(f"round {r + 1} {name:8s} {us:6.1f} µs CPU per request", flush=True)
    finally:
        await session.close()
        await pool.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="topos-request-cpu-") as scratch:
        work = Path(scratch)
        ca = make_ca()
        serving = make_serving_cert(ca)
        (work / "ca.crt").write_bytes(ca.certificate)
        (work / "tls.crt").write_bytes(serving.certificate)
        (work / "tls.key").write_bytes(serving.key)
        server = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(work / "tls.crt"), str(work / "tls.key")],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            print(f"load {os.getloadavg()[0]:.1f}, {args.in_flight} in flight, uvloop")
            uvloop.run(_run(port, work / "ca.crt", args.requests, args.in_flight, args.rounds))
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
