"""DRA GPU placement: the real kube-scheduler against Topos, the same claims on the same API server,
one after the other.

The cluster: the harness's etcd + kube-apiserver + kube-controller-manager, and ``--nodes``
simulated machines (default two each of DGX-1 V100, DGX A100 and 8×L40S PCIe: 48 GPUs) whose
GPUs are NVIDIA DRA devices — the ``gpu.nvidia.com`` DeviceClass and one ResourceSlice per node,
as NVIDIA's DRA driver publishes them (``devcluster.dra``), no ``nvidia.com/gpu`` capacity.
The workload (``--claims``, ``--seed``): pods whose ResourceClaimTemplate asks 2, 4 or 8 GPUs
(50 / 35 / 15 %) on one of the profiles (equally often; a node selector keeps it there, so every
profile gets its share whichever nodes a scheduler prefers), arriving one at a time, each
finishing a seeded number of arrivals later (then the controller-manager releases and deletes
its claim). Each scheduler runs the whole trace in a
namespace of its own, alone: kube-scheduler (its own profile name) first, then a ``topos
coordinator`` process with the nodes' agents streaming to it (``schedulerName: topos``). A pod
that cannot be placed when it arrives waits; the trace goes on.

Reported for each scheduler, per profile and claim size and overall: the share of multi-GPU
claims whose devices' worst link (from the profile's link matrix; devices joined to GPUs by name
``gpu-<i>`` and checked by ``uuid``) is the best class that node's hardware offers for that many
GPUs (``coordinator.sim.locality.best_link_rank``, as ``benchmarks/placement_quality.py``), and
the share NUMA-aligned (all devices on one NUMA node) among claims that could be (the profile
knows the GPUs' NUMA nodes — ``dgx1-v100`` does not — and k GPUs share one). kube-scheduler
allocates first fit and scores no topology; Topos chooses by NVLink/NUMA.

The Topos side needs the coordinator's DRA allocation (issue 13). If Topos binds a pod while
its claim is unallocated, or places nothing, the run stops with that said; ``--schedulers
kube-scheduler`` runs the kube-scheduler side alone.

    .venv/bin/python -m benchmarks.dra_placement [--nodes dgx1-v100:2,dgx-a100:2,pcie-8x:2]
        [--claims 120] [--seed 7] [--schedulers kube-scheduler,topos] [--json]

Needs ``python -m devcluster.binaries ensure --all`` (kube-scheduler).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from common.kube import (
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    KubeClient,
)
from common.model import NodeTopology, worst_link
from coordinator.sim.locality import best_link_rank
from devcluster.binaries import ensure
from devcluster.controlplane import ControlPlane
from devcluster.dra import (
    claim_pod,
    claim_template,
    node_slices,
    publish_classes,
    publish_node,
)
from devcluster.kube_wait import wait_for, wait_for_object
from devcluster.nodes import SimNode, parse_spec, plan_nodes, register
from devcluster.processes import free_port, spawn, stop_group
from devcluster.scheduler import KubeScheduler

SIZES = ((2, 0.50), (4, 0.35), (8, 0.15))
LIFETIME = (3, 14)  # finishes this many arrivals later (uniform): ≈ 70 % of 48 GPUs busy
SETTLE_S = 60.0  # an arrival's wait for "bound" or "unschedulable"
CLAIM_S = 15.0  # a bound pod's claim must show its allocation by then
RUN_LABEL = "topos-bench/dra-run"
PROFILE_LABEL = "topos-bench/profile"
KUBE = "kube-scheduler"
TOPOS = "topos"
_DEVICE = re.compile(r"^gpu-(\d+)$")


class BenchError(RuntimeError):
    """The run cannot give figures; the message says why."""


@dataclass(frozen=True, slots=True)
class Arrival:
    index: int
    gpus: int
    profile: str
    leaves_at: int  # the arrival index before which it finishes

    @property
    def pod(self) -> str:
        return f"c-{self.index:04d}-{self.gpus}g"


def make_trace(claims: int, seed: int, profiles: Sequence[str]) -> list[Arrival]:
    rng = random.Random(seed)
    sizes = [size for size, _ in SIZES]
    weights = [weight for _, weight in SIZES]
    return [
        Arrival(i, rng.choices(sizes, weights)[0], rng.choice(profiles), i + rng.randint(*LIFETIME))
        for i in range(claims)
    ]


@dataclass(frozen=True, slots=True)
class Placement:
    pod: str
    gpus: int
    profile: str
    node: str | None  # None: never placed
    devices: tuple[int, ...] = ()


# --- running one scheduler over the trace ------------------------------------------------------


def _settled(pod: dict[str, Any]) -> bool:
    """Its claim exists (the controller-manager made it) and it is bound or said unschedulable."""
    if _claim_name(pod) is None:
        return False
    if pod["spec"].get("nodeName"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)


def _claim_name(pod: dict[str, Any]) -> str | None:
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    return None


async def _allocated_devices(
    kube: KubeClient, ns: str, pod: dict[str, Any], scheduler: str
) -> tuple[int, ...]:
    name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]

    def ready(claim: dict[str, Any]) -> bool:
        return bool(((claim.get("status") or {}).get("allocation") or {}).get("devices"))

    try:
        claim_name = _claim_name(pod) or _claim_name(
            await wait_for_object(
                kube,
                PODS,
                name,
                lambda p: _claim_name(p) is not None,
                namespace=ns,
                timeout_s=CLAIM_S,
            )
        )
        claim = await wait_for_object(
            kube, RESOURCE_CLAIMS, str(claim_name), ready, namespace=ns, timeout_s=CLAIM_S
        )
    except AssertionError:
        raise BenchError(
            f"{scheduler} bound pod {name} to {node} but its ResourceClaim is not allocated "
            f"{CLAIM_S:.0f} s later: on a real node the kubelet would refuse to start it"
            + (
                " (Topos allocates DRA claims only with issue 13's coordinator work)"
                if scheduler == TOPOS
                else ""
            )
        ) from None
    indices = []
    for result in claim["status"]["allocation"]["devices"]["results"]:
        match = _DEVICE.match(result["device"])
        if result["pool"] != node or match is None:
            raise BenchError(f"claim of {name}: device {result} is not a GPU of node {node}")
        indices.append(int(match.group(1)))
    return tuple(sorted(indices))


async def run_trace(
    kube: KubeClient, scheduler: str, scheduler_name: str, run: str, trace: Sequence[Arrival]
) -> list[Placement]:
    """Every arrival and departure of ``trace`` in a fresh namespace; what was placed where."""
    ns = f"dra-{scheduler}-{uuid.uuid4().hex[:6]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    for gpus in sorted({a.gpus for a in trace}):
        await kube.create(
            RESOURCE_CLAIM_TEMPLATES, claim_template(f"gpus-{gpus}", gpus), namespace=ns
        )
    live: dict[str, Arrival] = {}
    placed: dict[str, Placement] = {}

    async def finish(arrival: Arrival) -> None:
        pod = await kube.get(PODS, arrival.pod, namespace=ns)
        claim = _claim_name(pod)
        if pod["spec"].get("nodeName"):
            devices = await _allocated_devices(kube, ns, pod, scheduler)
            node = pod["spec"]["nodeName"]
            placed[arrival.pod] = Placement(
                arrival.pod, arrival.gpus, arrival.profile, node, devices
            )
            patch = {"status": {"phase": "Succeeded"}}
            await kube.patch(PODS, arrival.pod, patch, namespace=ns, subresource="status")
        else:
            placed[arrival.pod] = Placement(arrival.pod, arrival.gpus, arrival.profile, None)
            await kube.delete(PODS, arrival.pod, namespace=ns)
        if claim is not None:  # released: the controller-manager deletes the pod's claim
            await wait_for(
                kube,
                RESOURCE_CLAIMS,
                lambda claims: True if not claims else None,
                namespace=ns,
                name=claim,
                what=f"claim {claim} released",
            )

    for arrival in trace:
        for due in [a for a in live.values() if a.leaves_at <= arrival.index]:
            await finish(live.pop(due.pod))
        body = claim_pod(
            arrival.pod,
            template=f"gpus-{arrival.gpus}",
            scheduler=scheduler_name,
            node_selector={RUN_LABEL: run, PROFILE_LABEL: arrival.profile},
        )
        await kube.create(PODS, body, namespace=ns)
        live[arrival.pod] = arrival
        try:
            pod = await wait_for_object(
                kube, PODS, arrival.pod, _settled, namespace=ns, timeout_s=SETTLE_S
            )
        except AssertionError:
            raise BenchError(
                f"{scheduler} neither placed pod {arrival.pod} nor said why within {SETTLE_S:.0f} s"
            ) from None
        if pod["spec"].get("nodeName"):
            await _allocated_devices(kube, ns, pod, scheduler)  # fail at once, not at the end
    for arrival in sorted(live.values(), key=lambda a: a.index):
        await finish(arrival)
    return [placed[a.pod] for a in trace]


# --- the two schedulers -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def topos_coordinator(
    plane: ControlPlane, nodes: Sequence[SimNode], run: str, work: Path
) -> Any:
    """A ``topos coordinator`` process scheduling onto the run's nodes, their agents streaming to
    it; yields its scheduler name."""
    port = free_port()
    config = {
        "coordinator": {"listen": f"127.0.0.1:{port}"},
        "auth": {"enabled": False},
        "leaderElection": {"enabled": False},
        "scheduler": {"nodeSelector": {RUN_LABEL: run}},
    }
    path = work / "topos.yaml"
    path.write_text(yaml.safe_dump(config))
    coordinator = spawn(
        [
            sys.executable,
            "-m",
            "cli.main",
            "coordinator",
            "--kubeconfig",
            str(plane.kubeconfig),
            "--config",
            str(path),
        ],
        log_path=work / "topos.log",
        die_with_parent=True,
    )
    ready = work / "agents.ready"
    argv = [sys.executable, "-m", "devcluster.nodes", "--kubeconfig", str(plane.kubeconfig)]
    argv += ["--coordinator", f"http://127.0.0.1:{port}", "--ready-file", str(ready)]
    argv += [item for n in nodes for item in ("--node", f"{n.name}={n.profile}")]
    agents = spawn(argv, log_path=work / "agents.log", die_with_parent=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            for proc, name in ((coordinator, "topos.log"), (agents, "agents.log")):
                if proc.poll() is not None:
                    raise BenchError(f"{name.split('.')[0]} exited; see {work / name}")
            if time.monotonic() > deadline:
                raise BenchError(f"agents not ready after 120 s; see {work / 'agents.log'}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)  # the agents' first stream to the coordinator
        yield TOPOS
    finally:
        for proc in (agents, coordinator):
            stop_group(proc.pid, grace_s=10.0, reap=proc.poll)


# --- figures ------------------------------------------------------------------------------------


@dataclass
class Tally:
    claims: int = 0
    best: int = 0
    numa_possible: int = 0
    numa_aligned: int = 0
    unplaced: int = 0

    def add(self, other: Tally) -> None:
        for key in ("claims", "best", "numa_possible", "numa_aligned", "unplaced"):
            setattr(self, key, getattr(self, key) + getattr(other, key))


def judge(placement: Placement, topology: NodeTopology) -> Tally:
    if placement.node is None:
        return Tally(unplaced=1)
    k = len(placement.devices)
    link = worst_link(topology, placement.devices)
    numa = [topology.gpus[i].numa_node for i in placement.devices]
    per_numa: dict[int, int] = {}
    for gpu in topology.gpus:
        if gpu.numa_node is not None:
            per_numa[gpu.numa_node] = per_numa.get(gpu.numa_node, 0) + 1
    # judged only where the profile knows every GPU's NUMA node and k of them share one
    known = len(per_numa) > 0 and None not in numa
    possible = known and max(per_numa.values()) >= k
    return Tally(
        claims=1,
        best=int(link.rank <= best_link_rank(topology, k)),
        numa_possible=int(possible),
        numa_aligned=int(possible and len(set(numa)) == 1),
    )


def tallies(
    placements: Sequence[Placement], topologies: dict[str, NodeTopology]
) -> dict[tuple[str, str], Tally]:
    """(profile, size) → tally, with ("all", size), (profile, "all") and ("all", "all")."""
    out: dict[tuple[str, str], Tally] = {}
    for p in placements:
        profile = p.profile
        one = judge(p, topologies[p.node]) if p.node else Tally(unplaced=1)
        for key in ((profile, str(p.gpus)), ("all", str(p.gpus)), (profile, "all"), ("all", "all")):
            out.setdefault(key, Tally()).add(one)
    return out


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "—"


def rows(results: dict[str, dict[tuple[str, str], Tally]]) -> list[dict[str, str]]:
    keys = sorted(
        {k for r in results.values() for k in r},
        key=lambda k: (k[0] == "all", k[0], k[1] == "all", k[1]),
    )
    table = []
    for key in keys:
        row = {"profile": key[0], "GPUs/claim": key[1]}
        for scheduler, result in results.items():
            t = result.get(key, Tally())
            row[f"{scheduler}: claims"] = f"{t.claims}" + (
                f" (+{t.unplaced} unplaced)" if t.unplaced else ""
            )
            row[f"{scheduler}: best link"] = _pct(t.best, t.claims)
            row[f"{scheduler}: NUMA-aligned"] = _pct(t.numa_aligned, t.numa_possible)
        table.append(row)
    return table


def format_rows(table: list[dict[str, str]]) -> str:
    if not table:
        return "(no claims)"
    headers = list(table[0])
    widths = [max(len(h), *(len(r[h]) for r in table)) for h in headers]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(r[h].ljust(w) for h, w in zip(headers, widths, strict=True)) for r in table]
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------------------


async def bench(
    args: argparse.Namespace, plane: ControlPlane, work: Path
) -> dict[str, dict[tuple[str, str], Tally]]:
    run = uuid.uuid4().hex[:6]
    nodes = plan_nodes(parse_spec(args.nodes))
    trace = make_trace(args.claims, args.seed, sorted({n.profile for n in nodes}))
    results: dict[str, dict[tuple[str, str], Tally]] = {}
    async with await KubeClient.connect(plane.kubeconfig) as kube:
        await register(kube, nodes, device_plugin=False)
        await publish_classes(kube)
        for node in nodes:
            labels = {RUN_LABEL: run, PROFILE_LABEL: node.profile}
            await kube.patch(NODES, node.name, {"metadata": {"labels": labels}})
            await publish_node(kube, node.name, node.profile)
            (published,) = await node_slices(kube, node.name)
            uuids = {
                d["name"]: d["attributes"]["uuid"]["string"] for d in published["spec"]["devices"]
            }
            if uuids != {f"gpu-{g.index}": g.uuid for g in node.topology.gpus}:
                raise BenchError(
                    f"{node.name}: published devices do not join the agent's GPUs by uuid"
                )
        topologies = {n.name: n.topology for n in nodes}
        for scheduler in args.schedulers:
            started = time.monotonic()
            if scheduler == KUBE:
                binaries = ensure(extra=True)
                if binaries.kube_scheduler is None:
                    raise BenchError(
                        "kube-scheduler missing: python -m devcluster.binaries ensure --all"
                    )
                with KubeScheduler.start(
                    binary=binaries.kube_scheduler,
                    kubeconfig=plane.kubeconfig,
                    name="kube-dra-bench",
                    directory=work,
                ) as ks:
                    placements = await run_trace(kube, KUBE, ks.name, run, trace)
            else:
                async with topos_coordinator(plane, nodes, run, work) as name:
                    placements = await run_trace(kube, TOPOS, name, run, trace)
                if not any(p.node for p in placements):
                    raise BenchError("Topos placed none of the claims")
            results[scheduler] = tallies(placements, topologies)
            say(args, f"{scheduler}: {len(trace)} claims in {time.monotonic() - started:.0f} s")
    return results


def say(args: argparse.Namespace, line: str) -> None:
    if not args.json:
        print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dra_placement", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", default="dgx1-v100:2,dgx-a100:2,pcie-8x:2")
    parser.add_argument("--claims", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--schedulers",
        default=f"{KUBE},{TOPOS}",
        type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    unknown = set(args.schedulers) - {KUBE, TOPOS}
    if unknown or not args.schedulers:
        parser.error(
            f"--schedulers: {KUBE} and/or {TOPOS}, not {', '.join(sorted(unknown)) or 'nothing'}"
        )
    with tempfile.TemporaryDirectory(prefix="topos-dra-bench-") as tmp:
        work = Path(tmp)
        with ControlPlane.start(binaries=ensure(extra=True), directory=work / "plane") as plane:
            try:
                results = asyncio.run(bench(args, plane, work))
            except BenchError as exc:
                print(f"dra_placement: {exc}", file=sys.stderr)
                return 1
    table = rows(results)
    if args.json:
        print(
            json.dumps(
                {
                    "rows": table,
                    "notes": [f"seed {args.seed}, {args.claims} claims, nodes {args.nodes}"],
                }
            )
        )
    else:
        print(f"seed {args.seed}, {args.claims} claims (2/4/8 GPUs), nodes {args.nodes}")
        print(format_rows(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
