"""The coordinator process: the HTTP API and agent streams on one event loop, beside background
loops (stale-agent sweeper, API-server sync, scheduler, leader election), started and stopped
through ``cleanup_ctx``.

:func:`wire` is the one wiring of the application, from the config tree
(:mod:`coordinator.app.config`) and a backend (:mod:`coordinator.app.backend`): ``topos
coordinator`` passes the API server (or, with ``--in-memory``, an in-memory cluster), ``topos demo``
its in-memory cluster, tests either. :func:`running` serves it on a port; :func:`main` is
``topos-coordinator``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import ssl
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence

import msgspec
from aiohttp import web

from common.hostport import parse_host_port
from common.logs import setup_logging
from common.wire import CloseReason
from coordinator.api import explain, gangs, pending, ui, whatif
from coordinator.api.keys import INVENTORY, SESSIONS
from coordinator.api.metrics import Metrics
from coordinator.app.auth.middleware import agent_node
from coordinator.app.auth.tls import TlsConfigError
from coordinator.app.backend import Backend
from coordinator.app.config.load import ConfigError, load_file
from coordinator.app.config.sections import Config
from coordinator.app.healthtaints import install_health_taints
from coordinator.app.httplog import server_logger
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import elect_leader
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.mismatches import install_mismatch_reporter
from coordinator.app.neuronetes import install_neuronetes
from coordinator.app.reload import install_reload
from coordinator.app.scheduler import install_scheduler
from coordinator.app.security import listener_tls, secure_app
from coordinator.app.web import build_app
from coordinator.inventory.store import Inventory

log = logging.getLogger("coordinator")

IDLE_CONNECTION_S = 75.0
"""An HTTP connection idle this long (before its first request, or between two) is closed."""


# --- background loops as cleanup contexts ------------------------------------------------------


def _stale_sweeper(interval_s: float) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        inventory, sessions = app[INVENTORY], app[SESSIONS]

        def sweep() -> None:
            for name in inventory.sweep():
                log.warning("node %s is stale: its agent is silent", name)
            for name in inventory.expire_unknown():
                log.warning("dropping node %s: its agent reports it, the API server has none", name)
                sessions.evict(name, CloseReason.UNKNOWN_NODE, "the API server has no such node")

        async def loop() -> None:
            failing = False
            while True:
                await asyncio.sleep(interval_s)
                try:
                    sweep()
                except Exception:  # one bad pass must not end the sweeping for good
                    if not failing:
                        log.exception("the stale-agent sweep failed; trying again every pass")
                    failing = True
                    continue
                if failing:
                    log.info("the stale-agent sweep works again")
                failing = False

        task = asyncio.create_task(loop(), name="stale-sweeper")
        grace = asyncio.get_running_loop().call_later(inventory.grace_left_s(), inventory.end_grace)
        yield
        grace.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx


async def _close_streams(app: web.Application) -> None:
    app[SESSIONS].close_all(CloseReason.SHUTTING_DOWN, "coordinator stopping")


def wire(
    config: Config,
    backend: Backend,
    *,
    inventory: Inventory | None = None,
    config_path: str | None = None,
) -> web.Application:
    """The coordinator's application: the inventory and agent streams, the API routes (explain,
    simulate, gangs), the scheduler runtime and gangs, request limits and authentication, leader
    election. ``inventory`` is the one to serve: by default a new one, or the in-memory cluster's
    (the only one allowed there); ``config_path``, the file ``config`` came from, is watched and
    its scheduling settings applied when it changes. Raises ConfigError for what the backend
    cannot run."""
    inv = backend.inventory(config, inventory)
    app = build_app(
        inv,
        metrics=Metrics(compat=config.metrics.compat),
        agent_auth=agent_node,
        stream_timeouts=config.coordinator.stream_timeouts,
        extra_routes=(*explain.ROUTES, *gangs.ROUTES, *pending.ROUTES, *ui.ROUTES, *whatif.ROUTES),
    )
    app.cleanup_ctx.append(_stale_sweeper(config.coordinator.sweep_every_s))
    backend.install(app, config)  # connected before the loops below start, closed after them
    install_scheduler(app, config, backend)
    if config_path is not None:
        install_reload(app, config_path, config, backend)
    install_mismatch_reporter(app)
    install_health_taints(app, config, backend)
    try:
        secure_app(app, config, backend)
    except ValueError as exc:
        raise ConfigError(f"config: {exc}") from None
    try:
        election = backend.leader_election(config)
    except ValueError as exc:
        raise ConfigError(f"config: {exc}") from None
    elect_leader(app, election, backend=backend)
    install_neuronetes(app, config, backend)
    app.on_shutdown.append(_close_streams)
    return app


@contextlib.asynccontextmanager
async def running(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ssl_context: ssl.SSLContext | None = None,
    idle_s: float = IDLE_CONNECTION_S,
) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (0: a free port) and yield its base URL. A connection idle
    for ``idle_s`` — before its first request or between two — is closed (aiohttp's own default
    is an hour, long enough for idle sockets to pile up; agent streams have their own deadlines)."""
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=2.0,
        logger=server_logger(),
        keepalive_timeout=idle_s,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    try:
        addresses = runner.addresses
        bound = addresses[0]
        scheme = "https" if ssl_context is not None else "http"
        yield f"{scheme}://{host if ':' not in host else f'[{host}]'}:{bound[1]}"
    finally:
        await runner.cleanup()


async def serve(
    app: web.Application, config: Config, ssl_context: ssl.SSLContext | None, *, where: str
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started = time.monotonic()
    host, port = config.coordinator.address
    async with running(app, host, port, ssl_context=ssl_context) as url:
        kind = type(loop).__module__.split(".")[0]  # uvloop or asyncio
        log.info("coordinator listening on %s (%s, event loop: %s)", url, where, kind)
        await stop.wait()
    log.info("coordinator stopped after %.0fs", time.monotonic() - started)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", metavar="K", help="kubeconfig of the API server")
    parser.add_argument(
        "--listen", metavar="HOST:PORT", help="API and agent streams (default 0.0.0.0:8080)"
    )
    parser.add_argument("--config", metavar="F", help="YAML configuration file")
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="no API server: the inventory holds only what agents report",
    )


def run_from_args(args: argparse.Namespace) -> int:
    config = load_file(args.config)
    if args.listen is not None:
        try:
            parse_host_port(args.listen)
        except ValueError as exc:
            raise ConfigError(f"--listen: {exc}") from None
        listen = msgspec.structs.replace(config.coordinator, listen=args.listen)
        config = msgspec.structs.replace(config, coordinator=listen)
    backend: Backend
    if args.in_memory:
        from coordinator.adapters.memory.cluster import MemoryCluster

        inventory = Inventory(stale_ttl_s=config.coordinator.stale_ttl_s)
        cluster = MemoryCluster(inventory)
        cluster.register_reported_nodes()  # no API server: an agent's node is registered for it
        backend = MemoryBackend(cluster)
    else:
        backend = KubeBackend(args.kubeconfig)
    try:
        ssl_context = listener_tls(config.tls)
    except TlsConfigError as exc:
        raise ConfigError(f"config: tls: {exc}") from None
    if not logging.getLogger().handlers:
        setup_logging()  # one JSON object per line, like the agent
    app = wire(config, backend, config_path=args.config)
    with asyncio.Runner(loop_factory=event_loop(config.coordinator.event_loop)) as runner:
        runner.run(serve(app, config, ssl_context, where=backend.where))
    return 0


def event_loop(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the process's event loop: uvloop's, or ``None`` (asyncio's own)."""
    if kind != "uvloop":
        return None
    import uvloop  # a dependency; imported only by the process that runs on it

    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="topos-coordinator", description="The Topos coordinator.")
    add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except ConfigError as exc:
        if args.debug:
            raise
        print(f"topos-coordinator: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
