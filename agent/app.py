"""The node agent (``topos agent`` / ``topos-agent``, DESIGN.md §2, §3, §8).

One event loop runs:

- the **discovery cycle**: discover (NVML or a profile's fake NVML, in a worker thread), mark
  GPUs that NVML events condemned, compute labels, publish them to the agent's Node (a GET, and a
  PATCH only when something changed), hand the snapshot and the kubelet's allocations to the
  stream client. It runs every ``--interval`` seconds and at once after an NVML event;
- the **NVML event watcher** (XID / lost GPU → that GPU unhealthy);
- the **stream client** to the coordinator, when ``--coordinator`` is given;
- an **HTTP server** (aiohttp) with ``/healthz``, ``/readyz`` and ``/metrics``.

``--once`` runs one discovery cycle, publishes and exits; nothing else starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import ssl
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from agent.health import GpuEvent, HealthLedger, NvmlEventWatcher
from agent.kube import KubeNodeApi
from agent.podresources import (
    DEFAULT_SOCKET,
    ContainerAllocation,
    PodResourcesClient,
    PodResourcesError,
)
from agent.publish import NodeNotFound, NodePublisher, PublishResult
from agent.stream import StreamClient, StreamSettings, StreamState
from common import wire
from common.kube import ClientSettings, KubeClient, KubeError
from common.labeling import COMPAT_SETS, LabelingSettings, labels
from common.labels import NodeLabels
from common.logs import setup_logging
from common.model import NodeTopology

if TYPE_CHECKING:
    from agent.devices import DeviceSource

log = logging.getLogger("topos.agent")

AGENT_VERSION: Final = "0.1.0"
SERVICE_ACCOUNT_TOKEN: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
DEFAULT_LISTEN: Final = "0.0.0.0:9400"


class AgentError(Exception):
    """A problem the user must fix (bad flag, missing node name, Node absent); one line."""


@dataclass(frozen=True, slots=True)
class Hardware:
    """Where snapshots come from, and the NVML object to watch for events (``None``: no events)."""

    source: DeviceSource
    nvml: Any = None
    close: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    node_name: str
    """The Node to publish to (``--node``, else ``$NODE_NAME`` from the downward API)."""
    profile: str | None = None
    """A hardware profile name or file: run on the fake NVML instead of the real one."""
    kubeconfig: str | None = None
    """Kubeconfig file; default ``$KUBECONFIG``, then the pod's in-cluster identity."""
    coordinator: str | None = None
    """Coordinator base URL (``http://topos-coordinator:8080``); no stream when ``None``."""
    once: bool = False
    """Discover, publish once, exit."""
    dry_run: bool = False
    """Print the labels and annotations instead of publishing (implies ``once``)."""
    interval_s: float = 60.0
    """Seconds between discovery cycles (an NVML event triggers one at once)."""
    listen: str | None = DEFAULT_LISTEN
    """``HOST:PORT`` for /healthz, /readyz, /metrics; ``None`` serves nothing."""
    labeling: LabelingSettings = field(default_factory=LabelingSettings)
    """Which label sets to write."""
    podresources_socket: str | None = DEFAULT_SOCKET
    """The kubelet's PodResources socket; ``None`` to not report allocations."""
    token_file: str | None = SERVICE_ACCOUNT_TOKEN
    """Bearer token for the coordinator stream (the pod's ServiceAccount token)."""
    coordinator_ca: str | None = None
    """CA bundle to verify the coordinator's certificate (system CAs when absent)."""


def stream_url(base: str) -> str:
    """``http://coord:8080`` → ``ws://coord:8080/v1/agents/stream`` (a full ws URL is kept)."""
    base = base.rstrip("/")
    if base.startswith(("ws://", "wss://")):
        return base if base.endswith("/v1/agents/stream") else base + "/v1/agents/stream"
    if base.startswith("https://"):
        return "wss://" + base.removeprefix("https://") + "/v1/agents/stream"
    if base.startswith("http://"):
        return "ws://" + base.removeprefix("http://") + "/v1/agents/stream"
    raise AgentError(f"--coordinator {base!r} must start with http://, https://, ws:// or wss://")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AgentError(f"--listen {text!r} must be HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def to_wire(allocations: Sequence[ContainerAllocation]) -> tuple[wire.ContainerAllocation, ...]:
    """PodResources records → stream records (containers holding nothing are left out)."""
    out = []
    for c in allocations:
        devices = tuple(
            wire.DeviceAllocation(
                resource=d.resource_name, ids=d.device_ids, numa_nodes=d.numa_nodes
            )
            for d in c.devices
            if d.device_ids
        )
        if devices or c.cpu_ids:
            out.append(
                wire.ContainerAllocation(
                    namespace=c.namespace,
                    pod=c.pod,
                    container=c.container,
                    devices=devices,
                    cpus=c.cpu_ids,
                )
            )
    return tuple(out)


class AgentMetrics:
    """The agent's Prometheus metrics, on a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.discovery_seconds = Histogram(
            "topos_agent_discovery_seconds",
            "Time to discover the node's hardware (one snapshot).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.publish_total = Counter(
            "topos_agent_publish_total",
            "Publish attempts by outcome: patched (something changed), unchanged, error.",
            ["result"],
            registry=self.registry,
        )
        self.publish_errors = Counter(
            "topos_agent_publish_errors_total",
            "Publish attempts that failed.",
            registry=self.registry,
        )
        self.cycle_errors = Counter(
            "topos_agent_cycle_errors_total",
            "Discovery cycles that failed before publishing.",
            registry=self.registry,
        )
        self.stream_state = Gauge(
            "topos_agent_stream_state",
            "1 for the stream client's current state, 0 for the others.",
            ["state"],
            registry=self.registry,
        )
        self.gpus_healthy = Gauge(
            "topos_agent_gpus_healthy", "Healthy GPUs in the last snapshot.", registry=self.registry
        )
        self.gpus_total = Gauge(
            "topos_agent_gpus", "GPUs in the last snapshot.", registry=self.registry
        )
        self.nvml_events = Counter(
            "topos_agent_nvml_events_total",
            "NVML events received, by whether they made a GPU unhealthy.",
            ["fatal"],
            registry=self.registry,
        )
        for state in StreamState:
            self.stream_state.labels(state.value).set(0)

    def set_stream_state(self, state: StreamState) -> None:
        for s in StreamState:
            self.stream_state.labels(s.value).set(1 if s is state else 0)


@dataclass(frozen=True, slots=True)
class CycleResult:
    topology: NodeTopology
    labels: NodeLabels
    publish: PublishResult | None


class Agent:
    """One node's agent. ``await agent.cycle()`` is one discovery+publish."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        source: DeviceSource,
        publisher: NodePublisher | None,
        podresources: PodResourcesClient | None = None,
        stream: StreamClient | None = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self.publisher = publisher
        self.podresources = podresources
        self.stream = stream
        self.metrics = AgentMetrics()
        self.ledger = HealthLedger()
        self.ready = False
        self.last_error: str | None = None
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._podresources_warned = False
        self._last_topology: NodeTopology | None = None

    async def discover(self) -> NodeTopology:
        started = time.perf_counter()
        topology = await asyncio.to_thread(self.source.discover)
        self.metrics.discovery_seconds.observe(time.perf_counter() - started)
        return self.ledger.apply(topology)

    async def allocations(self) -> tuple[wire.ContainerAllocation, ...]:
        if self.podresources is None:
            return ()
        try:
            return to_wire(await self.podresources.list())
        except PodResourcesError as exc:
            if not self._podresources_warned:
                log.warning("allocations unavailable", extra={"error": str(exc)})
                self._podresources_warned = True
            return ()

    async def cycle(self) -> CycleResult:
        """Discover, label, publish, stream. Raises on failure (the loop counts and logs it)."""
        topology = await self.discover()
        self._last_topology = topology
        self.metrics.gpus_total.set(len(topology.gpus))
        self.metrics.gpus_healthy.set(sum(1 for g in topology.gpus if g.healthy))
        desired = labels(topology, self.settings.labeling)
        if self.stream is not None:  # the coordinator hears of it even when the API server is down
            self.stream.publish(topology, await self.allocations())
        result: PublishResult | None = None
        if self.publisher is not None:
            try:
                result = await self.publisher.publish(desired)
            except Exception:
                self.metrics.publish_total.labels("error").inc()
                self.metrics.publish_errors.inc()
                raise
            self.metrics.publish_total.labels("patched" if result.patched else "unchanged").inc()
        self.ready = True
        self.last_error = None
        return CycleResult(topology=topology, labels=desired, publish=result)

    async def on_event(self, event: GpuEvent) -> None:
        self.metrics.nvml_events.labels("true" if event.fatal else "false").inc()
        changed = self.ledger.record(event)
        log.warning(
            "NVML event",
            extra={"gpu": event.uuid, "reason": event.reason, "fatal": event.fatal},
        )
        if changed:
            self.wake()

    def wake(self) -> None:
        """Run the next cycle now instead of at the end of the interval."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run_cycles(self) -> None:
        """Cycle every ``interval_s`` and whenever woken, until ``stop()``."""
        while not self._stopping.is_set():
            try:
                await self.cycle()
            except NodeNotFound as exc:
                self.ready = False
                self.last_error = str(exc)
                log.error("publish failed", extra={"error": str(exc)})
            except Exception as exc:  # a daemon keeps going; the error is logged and counted
                self.ready = False
                self.metrics.cycle_errors.inc()
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.error("discovery cycle failed", extra={"error": self.last_error})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.interval_s):
                    await self._wake.wait()
            self._wake.clear()


# --- HTTP ----------------------------------------------------------------------------------------

AGENT_KEY: Final = web.AppKey("agent", Agent)


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    agent = request.app[AGENT_KEY]
    if agent.ready:
        return web.json_response({"status": "ready"})
    return web.json_response(
        {"status": "not ready", "reason": agent.last_error or "no discovery cycle finished yet"},
        status=503,
    )


async def _metrics(request: web.Request) -> web.Response:
    agent = request.app[AGENT_KEY]
    body = generate_latest(agent.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_http_app(agent: Agent) -> web.Application:
    app = web.Application()
    app[AGENT_KEY] = agent
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


# --- wiring --------------------------------------------------------------------------------------


def open_hardware(profile: str | None, *, hostname: str | None) -> Hardware:
    """The fake NVML of ``profile`` (name or file), or the real NVML (blocking)."""
    # imported here: `topos <other command>` must not pay for (or depend on) discovery's imports
    from agent.devices import NvmlSource, ProfileSource

    if profile:
        try:
            source = ProfileSource(profile, hostname=hostname)
        except (ValueError, OSError) as exc:
            text = str(exc).strip() or type(exc).__name__
            raise AgentError(f"profile {profile}: {text.splitlines()[0]}") from None
        return Hardware(source=source, nvml=source.nvml, close=source.close)
    try:
        import pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        pynvml = None
    return Hardware(source=NvmlSource(nvml_module=pynvml, hostname=hostname), nvml=pynvml)


async def _read_token(path: str | None) -> str | None:
    if not path:
        return None

    def read() -> str | None:
        try:
            return Path(path).read_text().strip() or None
        except FileNotFoundError:
            return None

    return await asyncio.to_thread(read)


@contextlib.asynccontextmanager
async def _http(agent: Agent, listen: str | None) -> AsyncIterator[None]:
    if listen is None:
        yield
        return
    host, port = parse_listen(listen)
    runner = web.AppRunner(make_http_app(agent), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise AgentError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
        log.info("serving health and metrics", extra={"listen": listen})
        yield
    finally:
        await runner.cleanup()


async def _connect(settings: AgentSettings) -> KubeClient:
    try:
        return await KubeClient.connect(
            settings.kubeconfig, settings=ClientSettings(field_manager="topos-agent")
        )
    except KubeError as exc:
        raise AgentError(str(exc)) from None


async def run(settings: AgentSettings) -> int:
    """Run the agent with ``settings`` until SIGTERM/SIGINT (or one cycle with ``once``)."""
    hardware = await asyncio.to_thread(
        open_hardware, settings.profile, hostname=None if settings.dry_run else settings.node_name
    )
    try:
        return await _run_with(settings, hardware)
    finally:
        if hardware.close is not None:
            await asyncio.to_thread(hardware.close)


async def _run_with(settings: AgentSettings, hardware: Hardware) -> int:
    source = hardware.source
    if settings.dry_run:
        try:
            topology = await asyncio.to_thread(source.discover)
        except Exception as exc:
            raise AgentError(f"discovery failed: {type(exc).__name__}: {exc}") from None
        desired = labels(topology, settings.labeling)
        print(
            json.dumps(
                {"labels": dict(desired.labels), "annotations": dict(desired.annotations)},
                indent=2,
                sort_keys=True,
            )
        )
        return 0

    kube = await _connect(settings)
    podresources = (
        PodResourcesClient(settings.podresources_socket) if settings.podresources_socket else None
    )
    try:
        publisher = NodePublisher(KubeNodeApi(kube), settings.node_name)
        if settings.once:
            agent = Agent(settings, source=source, publisher=publisher)
            try:
                result = await agent.cycle()
            except NodeNotFound as exc:
                raise AgentError(str(exc)) from None
            except KubeError as exc:
                raise AgentError(
                    f"publishing to node {settings.node_name!r} failed: {exc}"
                ) from None
            except Exception as exc:
                raise AgentError(f"discovery failed: {type(exc).__name__}: {exc}") from None
            assert result.publish is not None
            print(
                f"node {settings.node_name}: {len(result.labels.labels)} labels, "
                f"{len(result.labels.annotations)} annotations, "
                + (
                    f"patched ({len(result.publish.added)} added, {len(result.publish.changed)} "
                    f"changed, {len(result.publish.removed)} removed)"
                    if result.publish.patched
                    else "unchanged"
                )
            )
            return 0
        return await _run_forever(settings, hardware, publisher, podresources)
    finally:
        if podresources is not None:
            await podresources.close()
        await kube.close()


async def _run_forever(
    settings: AgentSettings,
    hardware: Hardware,
    publisher: NodePublisher,
    podresources: PodResourcesClient | None,
) -> int:
    agent = Agent(settings, source=hardware.source, publisher=publisher, podresources=podresources)
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, agent.stop)
            installed.append(sig)
    try:
        await serve(agent, nvml=hardware.nvml)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    return 0


async def serve(agent: Agent, *, nvml: Any = None) -> None:
    """Run ``agent`` until ``agent.stop()``: discovery cycles, the NVML event watcher (when
    ``nvml`` is given), the stream client (``--coordinator``) and the HTTP endpoints."""
    settings = agent.settings
    async with contextlib.AsyncExitStack() as stack:
        stream: StreamClient | None = None
        if settings.coordinator:
            stream = await _open_stream(settings, agent, stack)
        watcher = NvmlEventWatcher(nvml) if nvml is not None else None
        await stack.enter_async_context(_http(agent, settings.listen))
        async with asyncio.TaskGroup() as tasks:
            if stream is not None:
                tasks.create_task(stream.run())
            if watcher is not None:
                tasks.create_task(_watch(watcher, agent))
            log.info(
                "agent started",
                extra={
                    "node": settings.node_name,
                    "profile": settings.profile,
                    "coordinator": settings.coordinator,
                    "interval_s": settings.interval_s,
                },
            )
            try:
                await agent.run_cycles()
            finally:
                if watcher is not None:
                    watcher.stop()
                if stream is not None:
                    await stream.close()
    log.info("agent stopped", extra={"node": settings.node_name})


async def _open_stream(
    settings: AgentSettings, agent: Agent, stack: contextlib.AsyncExitStack
) -> StreamClient:
    assert settings.coordinator is not None
    token = await _read_token(settings.token_file)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = await asyncio.to_thread(_ssl_context, settings.coordinator_ca)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context) if context is not None else None
    )
    stack.push_async_callback(session.close)
    stream = StreamClient(
        stream_url(settings.coordinator),
        settings.node_name,
        agent_version=AGENT_VERSION,
        settings=StreamSettings(headers=headers),
        session=session,
        on_state=agent.metrics.set_stream_state,
    )
    agent.stream = stream
    agent.metrics.set_stream_state(stream.state)
    return stream


def _ssl_context(ca_file: str | None) -> ssl.SSLContext | None:
    """A context trusting ``ca_file`` when it exists (it is an optional mount)."""
    if ca_file is None or not Path(ca_file).is_file():
        return None
    return ssl.create_default_context(cafile=ca_file)


async def _watch(watcher: NvmlEventWatcher, agent: Agent) -> None:
    """Run the NVML event watcher; if NVML can't do events, say so once and carry on."""
    try:
        await watcher.run(agent.on_event)
    except Exception as exc:
        log.warning(
            "NVML events unavailable; health comes from discovery only", extra={"error": str(exc)}
        )


# --- command line --------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``topos agent`` and ``topos-agent`` (DESIGN.md §8)."""
    parser.add_argument("--node", help="Node name (default: $NODE_NAME, set by the downward API)")
    parser.add_argument("--profile", help="hardware profile name or file: run on the fake NVML")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, then in-cluster)")
    parser.add_argument("--coordinator", metavar="URL", help="stream capacity to this coordinator")
    parser.add_argument("--once", action="store_true", help="discover, publish once and exit")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the labels and annotations as JSON instead of publishing (no cluster needed)",
    )
    parser.add_argument(
        "--interval", type=float, default=60.0, metavar="S", help="seconds between discoveries"
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"serve /healthz, /readyz, /metrics here ('' for none; default {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--labels-compat",
        default=os.environ.get("TOPOS_LABELS_COMPAT", ",".join(COMPAT_SETS)),
        metavar="SETS",
        help="compatibility label sets to write: any of gfd,neuronetes,kubenexus, or none "
        "(default: all, or $TOPOS_LABELS_COMPAT)",
    )
    parser.add_argument(
        "--mig-strategy",
        default=os.environ.get("TOPOS_MIG_STRATEGY", "mixed"),
        choices=("none", "single", "mixed"),
        help="GFD MIG strategy for the nvidia.com/* labels (default: mixed)",
    )
    parser.add_argument(
        "--pod-resources-socket",
        default=DEFAULT_SOCKET,
        metavar="PATH",
        help="kubelet PodResources socket ('' to not report allocations)",
    )
    parser.add_argument(
        "--token-file",
        default=SERVICE_ACCOUNT_TOKEN,
        metavar="PATH",
        help="bearer token for the coordinator stream (default: the ServiceAccount token)",
    )
    parser.add_argument(
        "--coordinator-ca",
        metavar="FILE",
        help="CA bundle for the coordinator's TLS certificate (ignored if the file is absent)",
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")


def settings_from_args(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> AgentSettings:
    env = os.environ if environ is None else environ
    node = args.node or env.get("NODE_NAME", "")
    if not node and not args.dry_run:
        raise AgentError(
            "no node name: set NODE_NAME (the DaemonSet sets it from spec.nodeName) or pass --node"
        )
    if args.interval <= 0:
        raise AgentError(f"--interval must be positive, not {args.interval}")
    try:
        labeling = LabelingSettings.from_compat(
            args.labels_compat, gfd_mig_strategy=args.mig_strategy
        )
    except ValueError as exc:
        raise AgentError(f"--labels-compat: {exc}") from None
    if args.coordinator:
        stream_url(args.coordinator)  # validate early
    if args.listen:
        parse_listen(args.listen)
    return AgentSettings(
        node_name=node or "(dry-run)",
        profile=args.profile,
        kubeconfig=args.kubeconfig,
        coordinator=args.coordinator,
        once=args.once or args.dry_run,
        dry_run=args.dry_run,
        interval_s=args.interval,
        listen=args.listen or None,
        labeling=labeling,
        podresources_socket=args.pod_resources_socket or None,
        token_file=args.token_file or None,
        coordinator_ca=args.coordinator_ca or None,
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Set up logging, run, and turn user errors into ``AgentError`` (one line)."""
    settings = settings_from_args(args)
    setup_logging(level=args.log_level)
    return asyncio.run(run(settings))


def main(argv: Sequence[str] | None = None) -> int:
    """``topos-agent``: the same flags as ``topos agent``."""
    parser = argparse.ArgumentParser(prog="topos-agent", description="The Topos node agent.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except AgentError as exc:
        if args.debug:
            raise
        print(f"topos-agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
