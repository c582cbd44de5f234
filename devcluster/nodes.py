"""Simulated GPU nodes for the dev cluster: ``topos devcluster up --nodes dgx-a100:4,pcie-8x:2``.

For each ``PROFILE:N`` (a built-in profile name or an imported profile file) this registers N
Ready Node objects whose capacity and allocatable match the profile's hardware — ``nvidia.com/gpu``
(GPUs not in MIG mode), ``nvidia.com/mig-<profile>`` per MIG instance (GFD's "mixed" names),
``cpu``, ``memory``, ``pods`` (110) and ``ephemeral-storage`` — and then keeps one real agent per
node running on that profile's fake NVML, in one background process, until
``topos devcluster down``. The agents publish labels and annotations like on a real node and, with
a coordinator (``up --coordinator``), stream to it with a token bound to the node's agent Pod
(``devcluster.credentials``). KWOK plays the nodes' kubelet (``devcluster.kubelet``).

Nodes are named ``<profile>-<k>`` (k counting per profile) and placed into the network in
registration order: **4 nodes per leaf, 4 leaves per spine** — node *i* (0-based across the whole
spec) gets ``topos.io/leaf=leaf-<i // 4>`` and ``topos.io/spine=spine-<i // 16>``, so
``dgx-a100:4,pcie-8x:2`` puts the four DGXs in ``leaf-0`` and the two PCIe boxes in ``leaf-1``,
all under ``spine-0``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from common.allocatable import allocatable_from_topology
from common.kube import NODES, AlreadyExists, KubeClient
from common.model import NodeTopology
from devcluster.terminations import Terminations

NODES_PER_LEAF: Final = 4
LEAVES_PER_SPINE: Final = 4
LEAF_LABEL: Final = "topos.io/leaf"
SPINE_LABEL: Final = "topos.io/spine"
SIMULATED_LABEL: Final = "topos.io/simulated"
MAX_NODES: Final = 5000
_STATE_FILE: Final = "nodes.json"
_READY_FILE: Final = "nodes.ready"
LOG_FILE: Final = "nodes.log"
_TOKENS_DIR: Final = "tokens"


@dataclass(frozen=True, slots=True)
class SimNode:
    name: str
    profile: str
    leaf: str
    spine: str
    topology: NodeTopology


def parse_spec(text: str) -> list[tuple[str, int]]:
    """``"dgx-a100:4,pcie-8x:2"`` → ``[("dgx-a100", 4), ("pcie-8x", 2)]``; ``ValueError`` naming
    the bad entry otherwise."""
    entries: list[tuple[str, int]] = []
    for raw in text.split(","):
        part = raw.strip()
        profile, sep, count = part.rpartition(":")
        if not part or not sep or not profile:
            raise ValueError(f"{part!r}: expected PROFILE:N, e.g. dgx-a100:4")
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"{part!r}: node count {count!r} is not a number") from None
        if n < 1:
            raise ValueError(f"{part!r}: node count must be at least 1")
        entries.append((profile, n))
    total = sum(n for _, n in entries)
    if total > MAX_NODES:
        raise ValueError(f"{total} nodes requested; at most {MAX_NODES}")
    return entries


def _slug(profile: str) -> str:
    stem = (
        Path(profile).stem if ("/" in profile or profile.endswith((".yaml", ".yml"))) else profile
    )
    slug = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
    return slug[:40].strip("-") or "node"


def plan_nodes(entries: list[tuple[str, int]]) -> list[SimNode]:
    """Node names, network position and topology for every requested node. An unknown profile or
    a broken profile file raises ``ValueError``."""
    from agent.devices import discover_profile

    nodes: list[SimNode] = []
    per_slug: dict[str, int] = {}
    for profile, count in entries:
        slug = _slug(profile)
        for _ in range(count):
            k = per_slug.get(slug, 0)
            per_slug[slug] = k + 1
            name = f"{slug}-{k}"
            i = len(nodes)
            try:
                topology = discover_profile(profile, hostname=name)
            except (ValueError, OSError, KeyError) as exc:
                text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
                raise ValueError(f"profile {profile}: {text}") from None
            nodes.append(
                SimNode(
                    name=name,
                    profile=profile,
                    leaf=f"leaf-{i // NODES_PER_LEAF}",
                    spine=f"spine-{i // (NODES_PER_LEAF * LEAVES_PER_SPINE)}",
                    topology=topology,
                )
            )
    return nodes


def capacity(topology: NodeTopology, *, device_plugin: bool = True) -> dict[str, str]:
    """What the kubelet and the NVIDIA device plugin (MIG strategy "mixed") would report
    (:func:`common.allocatable.allocatable_from_topology`), with CPU, memory and ephemeral
    storage for a profile that gives none. Without ``device_plugin`` (GPUs served by NVIDIA's
    DRA driver instead, see ``devcluster.dra``) no ``nvidia.com/…`` resources."""
    alloc = allocatable_from_topology(topology)
    out = {
        k: _text(k, v)
        for k, v in sorted(alloc.items())
        if device_plugin or not k.startswith("nvidia.com/")
    }
    out.setdefault("cpu", "8")
    out.setdefault("memory", "32Gi")
    out.setdefault("ephemeral-storage", "1000Gi")
    return out


def _text(resource: str, value: int) -> str:
    """A quantity as a kubelet writes it: whole cores, memory in Mi."""
    if resource == "cpu":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource == "memory" and value % 2**20 == 0:
        return f"{value // 2**20}Mi"
    return str(value)


def node_object(node: SimNode) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                LEAF_LABEL: node.leaf,
                SPINE_LABEL: node.spine,
                SIMULATED_LABEL: "true",
            },
        },
        "spec": {},
    }


def node_status(node: SimNode, *, device_plugin: bool = True) -> dict[str, Any]:
    cap = capacity(node.topology, device_plugin=device_plugin)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "capacity": cap,
            "allocatable": cap,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated node (topos devcluster)",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "machineID": node.name,
                "systemUUID": node.name,
                "bootID": node.name,
                "kernelVersion": "6.1.0-topos-sim",
                "osImage": "Topos simulated node",
                "containerRuntimeVersion": "none://0",
                "kubeletVersion": "v0.0.0-simulated",
                "kubeProxyVersion": "v0.0.0-simulated",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    }


async def register(kube: KubeClient, nodes: list[SimNode], *, device_plugin: bool = True) -> None:
    """Create (or refresh) each Node and set its status: Ready, with the profile's capacity
    (``device_plugin``: see :func:`capacity`)."""
    for node in nodes:
        body = node_object(node)
        try:
            await kube.create(NODES, body)
        except AlreadyExists:
            await kube.patch(NODES, node.name, {"metadata": body["metadata"]})
        status = node_status(node, device_plugin=device_plugin)
        await kube.patch(NODES, node.name, status, subresource="status")
        await _lift_not_ready_taint(kube, node.name)


async def _lift_not_ready_taint(kube: KubeClient, name: str) -> None:
    """Do the node lifecycle controller's part (it does not run here): otherwise the
    ``node.kubernetes.io/not-ready`` taint the API server's TaintNodesByCondition admission puts on
    every new Node would stay and keep every pod off a node that reports Ready."""
    obj = await kube.get(NODES, name)
    taints = (obj.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if t.get("key") != _NOT_READY_TAINT]
    if len(kept) != len(taints):
        await kube.patch(NODES, name, {"spec": {"taints": kept or None}})


_NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"


# --- the background process hosting the agents -------------------------------------------------


async def run_agents(
    nodes: list[tuple[str, str]],
    *,
    kubeconfig: str,
    coordinator: str | None,
    interval_s: float,
    ready_file: Path | None,
    token_dir: Path | None = None,
    remove_deleted_pods: bool = False,
) -> None:
    """One agent per ``(node, profile)`` on the fake NVML, until SIGTERM/SIGINT; each streams
    with the token ``token_dir/<node>.token`` when given. With ``remove_deleted_pods`` the
    kubelet's last word on deleted pods too (:mod:`devcluster.terminations`)."""
    from agent.app import serve
    from agent.cycle import Agent
    from agent.hardware import open_hardware
    from agent.kube import KubeNodeApi
    from agent.publish import NodePublisher
    from agent.settings import AgentSettings

    kube = await KubeClient.connect(kubeconfig)
    agents: list[Agent] = []
    closers = []
    try:
        for name, profile in nodes:
            settings = AgentSettings(
                node_name=name,
                profile=profile,
                kubeconfig=kubeconfig,
                coordinator=coordinator,
                interval_s=interval_s,
                listen=None,
                podresources_socket=None,
                token_file=str(token_dir / f"{name}.token") if token_dir else None,
            )
            hardware = open_hardware(profile, hostname=name)
            if hardware.close is not None:
                closers.append(hardware.close)
            agents.append(
                Agent(
                    settings,
                    source=hardware.source,
                    publisher=NodePublisher(KubeNodeApi(kube), name),
                )
            )

        def stop_all() -> None:
            for agent in agents:
                agent.stop()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_all)
        runs = [asyncio.create_task(serve(a)) for a in agents]
        # The kubelet's last word on deleted pods, UID-guarded (KWOK's stages delete by name).
        finishing = (
            asyncio.create_task(Terminations(kube, [n for n, _ in nodes]).run())
            if remove_deleted_pods
            else None
        )
        if ready_file is not None:
            # Ready once every agent has published at least once.
            while not all(a.ready or a.last_error for a in agents):
                if any(r.done() for r in runs):
                    break
                await asyncio.sleep(0.1)
            await asyncio.to_thread(ready_file.write_text, json.dumps({"agents": len(agents)}))
        try:
            await asyncio.gather(*runs)
        finally:
            if finishing is not None:
                finishing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await finishing
    finally:
        for close in closers:
            with contextlib.suppress(Exception):
                close()
        await kube.close()


def start_nodes(
    *,
    spec: str,
    kubeconfig: Path | str,
    directory: Path,
    dra: bool = False,
    shared: bool = False,
    coordinator: str | None = None,
) -> str:
    """``devcluster up --nodes SPEC``: register the nodes, start the agents' process, wait until
    every agent published once. With ``dra`` (``--dra``) the nodes' GPUs are NVIDIA DRA devices
    (``devcluster.dra``: DeviceClasses and a ResourceSlice per node) instead of device-plugin
    resources; ``shared`` (``--dra-shared``) publishes whole GPUs shareable (consumable
    capacity). With ``coordinator`` (a URL) each agent streams to it with a token bound to its
    node's agent Pod. ``ValueError`` for a bad spec or profile, ``RuntimeError`` when the agents'
    process fails."""
    nodes = plan_nodes(parse_spec(spec))
    directory.mkdir(parents=True, exist_ok=True)
    tokens = directory / _TOKENS_DIR if coordinator else None
    asyncio.run(_register(str(kubeconfig), nodes, dra=dra or shared, shared=shared, tokens=tokens))
    ready = directory / _READY_FILE
    ready.unlink(missing_ok=True)
    log_path = directory / LOG_FILE
    cmd = [
        sys.executable,
        "-m",
        "devcluster.nodes",
        "--kubeconfig",
        str(kubeconfig),
        "--ready-file",
        str(ready),
        "--remove-deleted-pods",  # KWOK plays the rest of the kubelet (devcluster.kubelet)
    ]
    if coordinator and tokens:
        cmd += ["--coordinator", coordinator, "--token-dir", str(tokens)]
    for node in nodes:
        cmd += ["--node", f"{node.name}={node.profile}"]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=Path(__file__).resolve().parents[1],
        )
    (directory / _STATE_FILE).write_text(
        json.dumps({"pid": proc.pid, "nodes": [n.name for n in nodes], "spec": spec})
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"simulated agents exited: {tail[0] if tail else proc.returncode}")
        if time.monotonic() > deadline:
            stop_nodes(directory=directory)
            raise RuntimeError(f"simulated agents not ready after 120s (see {log_path})")
        time.sleep(0.1)
    leaves = sorted({n.leaf for n in nodes})
    spines = sorted({n.spine for n in nodes})
    counts = ", ".join(f"{p} x{c}" for p, c in parse_spec(spec))
    return (
        f"devcluster: {len(nodes)} simulated nodes ({counts}) in {_plural(len(leaves), 'leaf')} "
        f"under {_plural(len(spines), 'spine')}"
        + (", GPUs as DRA devices (gpu.nvidia.com ResourceSlices)" if dra or shared else "")
        + (", shareable (consumable capacity)" if shared else "")
        + f"; agents pid {proc.pid}"
        + (f", streaming to {coordinator}" if coordinator else "")
        + f" (log: {log_path})"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {'leaves' if word == 'leaf' else word + 's'}"


async def _register(
    kubeconfig: str, nodes: list[SimNode], *, dra: bool, shared: bool = False, tokens: Path | None
) -> None:
    async with await KubeClient.connect(kubeconfig) as kube:
        await register(kube, nodes, device_plugin=not dra)
        if tokens is not None:
            from devcluster.credentials import agent_tokens

            await agent_tokens(kube, [n.name for n in nodes], tokens)
        if dra:
            from devcluster import dra as nvidia_dra

            await nvidia_dra.publish_classes(kube)
            for node in nodes:
                await nvidia_dra.publish_node(kube, node.name, node.profile, shared=shared)


def stop_nodes(*, directory: Path) -> None:
    """``devcluster down``: stop the agents' process (SIGTERM, then SIGKILL after 10 s)."""
    state_file = directory / _STATE_FILE
    if not state_file.exists():
        return
    try:
        pid = int(json.loads(state_file.read_text())["pid"])
    except (ValueError, KeyError, TypeError):
        state_file.unlink(missing_ok=True)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not _alive(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    state_file.unlink(missing_ok=True)
    (directory / _READY_FILE).unlink(missing_ok=True)
    shutil.rmtree(directory / _TOKENS_DIR, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: probe it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}").exists() and "zombie" not in _proc_state(pid)
    return done == 0


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster.nodes", description="Host simulated agents (devcluster)."
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", action="append", default=[], metavar="NAME=PROFILE")
    parser.add_argument("--coordinator", default=None)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--ready-file", type=Path, default=None)
    parser.add_argument("--token-dir", type=Path, default=None, metavar="DIR")
    parser.add_argument(
        "--remove-deleted-pods",
        action="store_true",
        help="remove a deleted pod bound to these nodes a second later, UID-guarded, as a kubelet "
        "does (devcluster up, where KWOK plays the kubelet otherwise)",
    )
    args = parser.parse_args(argv)
    pairs = []
    for item in args.node:
        name, sep, profile = item.partition("=")
        if not sep:
            parser.error(f"--node {item!r}: expected NAME=PROFILE")
        pairs.append((name, profile))
    from common.logs import setup_logging

    setup_logging()
    asyncio.run(
        run_agents(
            pairs,
            kubeconfig=args.kubeconfig,
            coordinator=args.coordinator,
            interval_s=args.interval,
            ready_file=args.ready_file,
            token_dir=args.token_dir,
            remove_deleted_pods=args.remove_deleted_pods,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
