"""A burst of requests on a cold ``Http1Pool`` against kube-apiserver: client CPU, connections
opened and wall time, with and without ``reuse_above``.

scheduler_perf starts the scheduler just before its measured phase, so every connection of the
lean pool is opened in the burst it measures (binds, 64 in flight: 79-80 TLS connections per
1,000 pods, against kube-scheduler's 4-12 over HTTP/2). Each round here makes a fresh pool (the
TLS session of the round before resumed, as the coordinator's later connections are), sends
``--requests`` Events (as the coordinator's Scheduled Events), ``--in-flight`` at once, to the
test control plane's kube-apiserver (started here, the admin's client certificate), and prints
this process's CPU per request (user + system), the connections the pool opened and the burst's
wall time; the arms alternate, the medians at the end.

    python -m benchmarks.pool_burst [--requests 1000] [--in-flight 64] [--rounds 5]
        [--above 16] [--wait-s 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import time

import uvloop

from benchmarks.request_cpu import _Server, _tls, apiserver_target
from common.kube.http1 import Http1Pool


async def _burst(
    server: _Server,
    tls: ssl.SSLContext,
    *,
    requests: int,
    in_flight: int,
    above: int | None,
    wait_s: float,
) -> tuple[float, int, float]:
    """CPU µs per request, connections opened, wall seconds."""
    port, headers = server.http1_port, dict(server.headers)
    pool = Http1Pool(
        "127.0.0.1",
        port,
        authority=f"127.0.0.1:{port}",
        tls=tls,
        reuse_above=above,
        reuse_wait_s=wait_s,
    )
    slots = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with slots:
            path, body = server.request(i)
            reply = await pool.exchange("POST", path, headers, body, timeout_s=30)
            assert reply.status == 201, (reply.status, reply.body[:200])

    began, cpu = time.monotonic(), time.process_time()
    try:
        await asyncio.gather(*(one(i) for i in range(requests)))
        return (
            (time.process_time() - cpu) / requests * 1e6,
            pool.opened,
            time.monotonic() - began,
        )
    finally:
        await pool.close()


async def _run(server: _Server, args: argparse.Namespace) -> None:
    tls = _tls(server, ["http/1.1"])  # one context: its TLS session resumed round to round
    arms = {"each opens": None, f"reuse above {args.above}": args.above}
    seen: dict[str, list[tuple[float, int, float]]] = {name: [] for name in arms}
    await _burst(server, tls, requests=64, in_flight=64, above=None, wait_s=0.0)  # a TLS session
    for r in range(args.rounds):
        names = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in names:
            cost = await _burst(
                server,
                tls,
                requests=args.requests,
                in_flight=args.in_flight,
                above=arms[name],
                wait_s=args.wait_s,
            )
            seen[name].append(cost)
            us, opened, wall = cost
            print(
                f"round {r + 1} {name:15s} {us:6.1f} µs CPU per request, {opened:3d} connections"
                f" opened, {wall:5.2f} s ({args.requests / wall:6.0f} requests/s), load "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for name, costs in seen.items():
        cpu, connections, seconds = (statistics.median(c[i] for c in costs) for i in range(3))
        print(
            f"median {name:15s} {cpu:6.1f} µs CPU per request, {connections:5.1f} connections, "
            f"{seconds:5.2f} s"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--above", type=int, default=16)
    parser.add_argument("--wait-s", type=float, default=0.5)
    args = parser.parse_args(argv)
    with apiserver_target() as server:
        print(
            f"load {os.getloadavg()[0]:.1f}, {args.requests} Events per burst, "
            f"{args.in_flight} in flight, uvloop, kube-apiserver, wait {args.wait_s} s"
        )
        uvloop.run(_run(server, args))


if __name__ == "__main__":
    main()
