"""The coordinator process: the HTTP API and agent streams on one event loop, beside background
loops (stale-agent sweeper, API-server sync), started and stopped through ``cleanup_ctx``.

``topos coordinator`` / ``topos-coordinator`` run :func:`main`. Tests, the demo and benchmarks use
:func:`create_app` and :func:`running` to get the same application on a loopback port.
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
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from common.kube import KubeClient
from common.logs import setup_logging
from common.wire import CloseReason
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.api import explain, gangs
from coordinator.api.keys import INVENTORY, READINESS, SESSIONS, AgentAuthenticator, allow_any_node
from coordinator.api.routing import Route
from coordinator.app.auth.middleware import agent_node
from coordinator.app.auth.tls import TlsConfigError
from coordinator.app.leadership import elect_leader
from coordinator.app.scheduler import install_scheduler
from coordinator.app.security import SecuritySettings, secure_app
from coordinator.app.web import build_app
from coordinator.inventory.store import DEFAULT_STALE_TTL_S, Inventory

log = logging.getLogger("coordinator")

DEFAULT_LISTEN = "0.0.0.0:8080"
KUBE_SYNC = web.AppKey("kube_sync", KubeSync)


class ConfigError(ValueError):
    """A bad command-line value or configuration file."""


@dataclass(frozen=True, kw_only=True)
class CoordinatorSettings:
    host: str = "0.0.0.0"
    """Address the API and agent streams listen on."""
    port: int = 8080
    """Port (0: any free port, see :func:`running`)."""
    stale_ttl_s: float = DEFAULT_STALE_TTL_S
    """An agent silent this long marks its node stale (no new placements there)."""
    sweep_interval_s: float | None = None
    """How often to look for stale agents (default: a quarter of the TTL)."""
    kubeconfig: str | None = None
    """Kubeconfig for the API server (default: in-cluster, then ``$KUBECONFIG``)."""
    in_memory: bool = False
    """No API server: the inventory holds what agents report, nothing else."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Config-file sections other components read (scheduling weights, tiers, …)."""

    @property
    def sweep_every_s(self) -> float:
        return self.sweep_interval_s or max(self.stale_ttl_s / 4, 0.01)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT, e.g. 0.0.0.0:8080")
    return (host.strip("[]") or "0.0.0.0"), int(port)


def load_settings(
    *,
    config_file: str | None = None,
    listen: str | None = None,
    kubeconfig: str | None = None,
    in_memory: bool = False,
) -> CoordinatorSettings:
    """Settings from the config file (YAML), overridden by command-line values.

    The file's ``coordinator`` section may hold ``listen``, ``staleTtlSeconds``,
    ``sweepIntervalSeconds``; other sections are kept in ``extra`` for other components.
    """
    doc: dict[str, Any] = {}
    if config_file is not None:
        try:
            loaded = yaml.safe_load(Path(config_file).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config {config_file}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config {config_file} is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config {config_file}: expected a mapping at the top level")
        doc = loaded or {}
    section = doc.get("coordinator") or {}
    if not isinstance(section, dict):
        raise ConfigError("config: 'coordinator' must be a mapping")
    host, port = parse_listen(listen or str(section.get("listen", DEFAULT_LISTEN)))
    ttl = _positive(section.get("staleTtlSeconds", DEFAULT_STALE_TTL_S), "staleTtlSeconds")
    sweep = section.get("sweepIntervalSeconds")
    return CoordinatorSettings(
        host=host,
        port=port,
        stale_ttl_s=ttl,
        sweep_interval_s=None if sweep is None else _positive(sweep, "sweepIntervalSeconds"),
        kubeconfig=kubeconfig,
        in_memory=in_memory,
        extra={k: v for k, v in doc.items() if k != "coordinator"},
    )


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"config: coordinator.{name} must be a positive number, not {value!r}")
    return float(value)


# --- background loops as cleanup contexts ------------------------------------------------------


def _stale_sweeper(interval_s: float) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        inventory = app[INVENTORY]

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                for name in inventory.sweep():
                    log.warning("node %s is stale: its agent is silent", name)

        task = asyncio.create_task(loop(), name="stale-sweeper")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx


def _kube_sync(kubeconfig: str | None) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        readiness = app[READINESS]
        readiness.set("inventory", False)
        client = await KubeClient.connect(kubeconfig)
        sync = KubeSync(client, app[INVENTORY], on_synced=lambda: readiness.set("inventory", True))
        app[KUBE_SYNC] = sync
        task = asyncio.create_task(sync.run(), name="kube-sync")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close()

    return ctx


async def _close_streams(app: web.Application) -> None:
    app[SESSIONS].close_all(CloseReason.SHUTTING_DOWN, "coordinator stopping")


def create_app(
    settings: CoordinatorSettings,
    *,
    inventory: Inventory | None = None,
    agent_auth: AgentAuthenticator = allow_any_node,
    extra_routes: Iterable[Route] = (),
    background: Iterable[Callable[[web.Application], AsyncIterator[None]]] = (),
) -> web.Application:
    """The coordinator's application. Background loops are ``cleanup_ctx`` generators; the
    API-server sync is one of them unless ``settings.in_memory``."""
    inv = inventory if inventory is not None else Inventory(stale_ttl_s=settings.stale_ttl_s)
    # Scheduler runtime (coordinator.engine, issue 5): the explain/simulate routes.
    routes = (*explain.ROUTES, *gangs.ROUTES, *extra_routes)  # + gangs/domains (issue 6)
    app = build_app(inv, agent_auth=agent_auth, extra_routes=routes)
    app.cleanup_ctx.append(_stale_sweeper(settings.sweep_every_s))
    if settings.in_memory:
        app[READINESS].set("inventory", True)
    else:
        app.cleanup_ctx.append(_kube_sync(settings.kubeconfig))
    app.cleanup_ctx.extend(background)
    # Scheduler runtime (issue 5): the scheduling loop, unless `scheduler: {enabled: false}`.
    try:
        install_scheduler(
            app, settings.extra, kubeconfig=settings.kubeconfig, in_memory=settings.in_memory
        )
    except ValueError as exc:
        raise ConfigError(f"config: {exc}") from None
    app.on_shutdown.append(_close_streams)
    return app


@contextlib.asynccontextmanager
async def running(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (0: a free port) and yield its base URL."""
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0)
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


# --- deployment wiring (issue 8): authentication, limits, TLS, leader election ------------------


def create_secure_app(
    settings: CoordinatorSettings,
) -> tuple[web.Application, ssl.SSLContext | None]:
    """:func:`create_app` as ``topos coordinator`` serves it: request limits and TokenReview
    authentication (config sections ``limits``, ``auth``; off with ``--in-memory``), the agent
    stream bound to the caller's own node, leader election (``leaderElection``) and the
    listener's TLS context (``tls``). Raises ConfigError for a bad section."""
    try:
        security = SecuritySettings.from_config(settings.extra, in_memory=settings.in_memory)
        ssl_context = security.ssl_context()
        app = create_app(settings, agent_auth=agent_node)
        secure_app(app, security, kubeconfig=settings.kubeconfig)
        elect_leader(
            app,
            settings.extra.get("leaderElection"),
            kubeconfig=settings.kubeconfig,
            in_memory=settings.in_memory,
        )
    except (ValueError, TlsConfigError) as exc:
        raise ConfigError(f"config: {exc}") from None
    return app, ssl_context


async def serve(settings: CoordinatorSettings) -> None:
    app, ssl_context = create_secure_app(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started = time.monotonic()
    async with running(app, settings.host, settings.port, ssl_context=ssl_context) as url:
        log.info(
            "coordinator listening on %s (%s)",
            url,
            "in-memory" if settings.in_memory else "API server",
        )
        await stop.wait()
    log.info("coordinator stopped after %.0fs", time.monotonic() - started)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", metavar="K", help="kubeconfig of the API server")
    parser.add_argument(
        "--listen", metavar="HOST:PORT", help=f"API and agent streams (default {DEFAULT_LISTEN})"
    )
    parser.add_argument("--config", metavar="F", help="YAML configuration file")
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="no API server: the inventory holds only what agents report",
    )


def run_from_args(args: argparse.Namespace) -> int:
    settings = load_settings(
        config_file=args.config,
        listen=args.listen,
        kubeconfig=args.kubeconfig,
        in_memory=args.in_memory,
    )
    if not logging.getLogger().handlers:
        setup_logging()  # one JSON object per line, like the agent
    asyncio.run(serve(settings))
    return 0


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
