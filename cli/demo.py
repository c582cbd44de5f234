"""``topos demo``: the embedded demo (docs/design.md §7). No cluster, no GPU needed.

In one process, on loopback:

1. the real coordinator application (``coordinator.app.main.wire``: agent stream, inventory,
   explain, simulate, gangs, domains) with the scheduler runtime and the gang step over an
   in-memory cluster (``coordinator.demo.EmbeddedCoordinator``) — the scheduling loop and core
   that run on Kubernetes;
2. 32 Node objects in two spines of two leaves (DGX H100, DGX A100 with and without MIG, 8×L40S
   PCIe boxes, MIG-split A100s), labelled as their agents would label them;
3. one real agent per node (``agent.cycle.Agent``) on the profile-driven fake NVML, streaming its
   hardware over the real WebSocket/msgpack capacity stream;
4. a realistic workload in two phases (``coordinator.demo.scenario``), then a report of where
   every job went and why, GPU utilisation, fragmentation and locality.

``--serve`` keeps the API up afterwards (Ctrl-C or SIGTERM to stop). Authentication is off: the demo
listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import aiohttp

from agent.app import serve
from agent.cycle import Agent
from agent.hardware import Hardware, open_hardware
from agent.settings import AgentSettings
from cli.errors import CliError
from common.allocatable import allocatable_from_topology
from common.labeling import labels
from common.model import NodeTopology
from coordinator.demo import (
    DEMO_NAMESPACE,
    DemoJob,
    DemoNode,
    EmbeddedCoordinator,
    build_report,
    demo_nodes,
    demo_workload,
    format_report,
)
from coordinator.demo.inference import POOL, format_steps, run_inference_pool


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the embedded demo: coordinator, 32 simulated GPU nodes, a workload (no cluster)",
        description=(
            "Start the coordinator and 32 simulated GPU nodes (agents on the fake NVML, "
            "streaming over WebSocket) in this process, schedule a realistic workload, and "
            "report where every job went and why."
        ),
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the API and its topology view (/ui/) up afterwards (Ctrl-C or SIGTERM to stop)",
    )
    parser.add_argument("--port", type=int, default=0, help="API port on 127.0.0.1 (default: any)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, one line per finished stage
    otherwise (logs stay readable)."""

    def __init__(self, stream: TextIO, *, width: int = 28) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.width = width
        self.started = time.monotonic()

    def update(self, label: str, done: int, total: int) -> None:
        if not self.tty:
            return
        filled = self.width * done // max(total, 1)
        bar = "█" * filled + "░" * (self.width - filled)
        self.stream.write(f"\r  {label:<34s} {bar} {done}/{total} ")
        self.stream.flush()

    def done(self, label: str, detail: str) -> None:
        elapsed = time.monotonic() - self.started
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(f"  [{elapsed:5.1f}s] {label}: {detail}\n")
        self.stream.flush()


def allocatable(topology: NodeTopology) -> dict[str, str]:
    """What the kubelet and the device plugin advertise for this hardware."""
    out: dict[str, str] = {}
    for key, value in allocatable_from_topology(topology).items():
        out[key] = f"{value}m" if key == "cpu" else str(value)
    return out


async def _start_nodes(
    coord: EmbeddedCoordinator, nodes: list[DemoNode], progress: Progress
) -> list[tuple[Agent, Hardware]]:
    """Node objects (as the kubelet registers them, with the labels the agent publishes) and one
    agent per node streaming to the coordinator."""
    out: list[tuple[Agent, Hardware]] = []
    for i, node in enumerate(nodes, start=1):
        hardware = await asyncio.to_thread(open_hardware, node.profile, hostname=node.name)
        topology = await asyncio.to_thread(hardware.source.discover)
        coord.cluster.add_node(
            node.name,
            labels={**labels(topology).labels, **node.labels},
            allocatable=allocatable(topology),
        )
        settings = AgentSettings(
            node_name=node.name,
            profile=node.profile,
            coordinator=coord.url,
            interval_s=3600.0,
            listen=None,
            podresources_socket=None,
            token_file=None,
        )
        out.append((Agent(settings, source=hardware.source, publisher=None), hardware))
        progress.update("nodes on fake NVML", i, len(nodes))
    return out


async def _wait_for(
    condition: Callable[[], int],
    total: int,
    label: str,
    progress: Progress,
    *,
    timeout_s: float,
) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        done = condition()
        progress.update(label, done, total)
        if done >= total or time.monotonic() > deadline:
            return done
        await asyncio.sleep(0.05)


def _bound(coord: EmbeddedCoordinator, jobs: list[DemoJob]) -> int:
    names = {str(p["metadata"]["name"]) for j in jobs for p in j.pods}
    return sum(
        1
        for p in coord.cluster.pods()
        if p["metadata"]["name"] in names and (p.get("spec") or {}).get("nodeName")
    )


async def _settle(
    coord: EmbeddedCoordinator, jobs: list[DemoJob], label: str, progress: Progress
) -> None:
    """Until the scheduler has nothing left to try and the bound count is steady (gang steps
    run on a ticker, so an idle loop alone is not the end)."""
    total = sum(len(j.pods) for j in jobs)
    steady_since = time.monotonic()
    last = -1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        await coord.settle(timeout_s=30)
        now = _bound(coord, jobs)
        progress.update(label, now, total)
        if now != last:
            last, steady_since = now, time.monotonic()
        elif time.monotonic() - steady_since > 1.5:
            return
        await asyncio.sleep(0.1)


async def _explain(url: str, name: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/v1/pods/{DEMO_NAMESPACE}/{name}/explain?limit=3") as resp,
    ):
        data: dict[str, Any] = await resp.json()
        return data


async def demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    progress = Progress(err)
    nodes = demo_nodes()
    jobs = demo_workload()
    started = time.monotonic()
    async with EmbeddedCoordinator(port=args.port) as coord:
        progress.done("coordinator", f"listening on {coord.url} (auth off: demo, loopback only)")
        agents = await _start_nodes(coord, nodes, progress)
        progress.done("nodes", f"{len(nodes)} Node objects, hardware from profiles")
        tasks = [
            asyncio.create_task(serve(agent), name=f"agent {agent.settings.node_name}")
            for agent, _ in agents
        ]
        try:
            connected = await _wait_for(
                lambda: sum(1 for n in coord.inventory.nodes() if n.topology is not None),
                len(nodes),
                "agents streaming hellos",
                progress,
                timeout_s=30,
            )
            if connected < len(nodes):
                raise CliError(f"only {connected}/{len(nodes)} agents reached the coordinator")
            progress.done("agents", f"{connected} agents connected over WebSocket (msgpack)")

            phase1 = [j for j in jobs if j.phase == 1]
            for job in phase1:
                for pod in job.pods:
                    coord.cluster.create_pod(pod)
            await _settle(coord, phase1, "phase 1: scheduling", progress)
            bound1 = _bound(coord, phase1)
            total1 = sum(len(j.pods) for j in phase1)
            progress.done("phase 1", f"{total1} pods submitted, {bound1} bound")

            finished = [j for j in jobs if j.finishes]
            for job in finished:
                for pod in job.pods:
                    coord.cluster.finish_pod(DEMO_NAMESPACE, str(pod["metadata"]["name"]))
            for job in (j for j in jobs if j.phase == 2):
                for pod in job.pods:
                    coord.cluster.create_pod(pod)
            await _settle(coord, jobs, "phase 2: finishing, rescheduling", progress)
            progress.done(
                "phase 2",
                f"{', '.join(j.name for j in finished)} finished; "
                f"{_bound(coord, jobs)} pods bound in all",
            )
            scaling = await run_inference_pool(
                coord.cluster, DEMO_NAMESPACE, lambda: coord.settle(timeout_s=30)
            )
            top = max(step.replicas for step in scaling)
            progress.done("inference", f"AgentPool {POOL}: 1 → {top} → 1 replicas on token load")
            report = build_report(jobs, coord.cluster.pods(), coord.inventory)
            explained = await _explain(coord.url, "oversized")
            stats = coord.runtime.scheduler.stats
            elapsed = time.monotonic() - started
            if args.json:
                doc = report.as_dict()
                doc["coordinator"] = coord.url
                doc["scheduler"] = {"attempts": stats.attempts, "bound": stats.bound}
                doc["explain_oversized"] = explained
                doc["inference_pool"] = [step.as_dict() for step in scaling]
                out.write(json.dumps(doc, indent=2) + "\n")
            else:
                _print_report(out, coord, nodes, jobs, report, explained, elapsed)
                out.write(format_steps(scaling))
            if args.serve:
                with _stop_signals() as stopped, contextlib.suppress(asyncio.CancelledError):
                    _print_serving(out, coord.url)  # once a signal is heard, not before
                    out.flush()
                    await stopped.wait()
        finally:
            for agent, _ in agents:
                agent.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            for _, hardware in agents:
                if hardware.close is not None:
                    hardware.close()
    return 0


@contextlib.contextmanager
def _stop_signals() -> Iterator[asyncio.Event]:
    """An event set by SIGINT (Ctrl-C) or SIGTERM. The loop's own handlers, not Python's default
    KeyboardInterrupt: a process started with SIGINT ignored — in the background of a script, as
    ``nohup … &`` does, which a child inherits — is still stopped by it, and SIGTERM (``kill``,
    a container runtime) stops it as cleanly."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _print_report(
    out: TextIO,
    coord: EmbeddedCoordinator,
    nodes: list[DemoNode],
    jobs: list[DemoJob],
    report: Any,
    explained: dict[str, Any],
    elapsed: float,
) -> None:
    stats = coord.runtime.scheduler.stats
    w = out.write
    w("Topos demo: the coordinator and 32 simulated GPU nodes in this process\n")
    w(f"  coordinator  {coord.url}  (authentication off: demo on loopback only)\n")
    w(f"  agents       {len(nodes)}, fake NVML from hardware profiles, streaming over WebSocket\n")
    w(
        "  fabric       spine-1: leaf-1, leaf-2 (DGX H100)   "
        "spine-2: leaf-3 (DGX A100, A100 MIG), leaf-4 (8×L40S PCIe, A100 MIG)\n"
    )
    w(
        f"  workload     {sum(len(j.pods) for j in jobs)} pods in {len(jobs)} jobs; phase 2 ends "
        f"{', '.join(j.name for j in jobs if j.finishes)}\n\n"
    )
    w(format_report(report))
    state = explained.get("state", "?")
    message = explained.get("message") or explained.get("reason") or ""
    w(
        f"\nWhy not, from the explain API (GET /v1/pods/{DEMO_NAMESPACE}/oversized/explain): "
        f"{state}: {message}\n"
    )
    w(f"\nScheduler: {stats.attempts} attempts, {stats.bound} binds; done in {elapsed:.1f} s.\n")


def _print_serving(out: TextIO, url: str) -> None:
    out.write(
        f"\nServing the API at {url} (authentication off) — Ctrl-C to stop.\n"
        f"  Topology view: {url}/ui/  (open it in a browser)\n"
        "Try:\n"
        f"  curl {url}/v1/nodes\n"
        f"  curl {url}/v1/domains\n"
        f"  curl {url}/v1/gangs\n"
        f"  curl {url}/v1/pending\n"
        f"  curl {url}/v1/pods/{DEMO_NAMESPACE}/llm-pretrain-2-0/explain\n"
        f"  curl -X POST {url}/v1/simulate -H 'Content-Type: application/json' "
        '-d \'{"pods": [{"metadata": {"name": "what-if"}, "spec": {"schedulerName": '
        '"topos", "containers": [{"name": "c", "resources": {"limits": '
        '{"nvidia.com/gpu": "4"}}}]}}]}\'\n'
    )


def run(args: argparse.Namespace) -> int:
    if args.port < 0 or args.port > 65535:
        raise CliError("--port must be between 0 and 65535")
    try:
        return asyncio.run(demo(args, sys.stdout, sys.stderr))
    except OSError as exc:
        raise CliError(f"cannot start the demo: {exc}") from None
