"""Coordinator memory with a 1,000-node / 8,000-GPU inventory (goal: RSS < 300 MiB).

Each measurement runs in a fresh Python process (``psutil`` RSS after ``gc.collect()``):

1. **floor** — an interpreter that imports the coordinator (aiohttp app, inventory, scheduling
   core, scheduler runtime) and holds nothing: what any coordinator built on these libraries pays.
2. **coordinator** — the same imports, then 1,000 DGX A100 nodes (8 GPUs, 8 NUMA nodes, 10 NICs
   each; distinct GPU UUIDs) arrive through the **real hello path**: a msgpack ``hello`` frame per
   node decoded and applied by the coordinator's ``AgentSession`` (sessions kept, as live streams
   keep them), plus the Node object of each (as the API-server sync or the in-memory cluster
   upserts it). RSS with the inventory loaded; then the scheduler's ``ClusterView`` snapshot is
   built from it and 1,000 single-GPU pods are decided and assumed — RSS again (what a running
   scheduler holds).
3. **baseline: JSON dicts** — the same 1,000 topologies kept the way a naive design would: each
   node's full topology as a parsed JSON document (Python dicts and lists).

Agent RSS and CPU per cycle are measured by ``benchmarks/agent_cycle.py``.

Run: ``.venv/bin/python -m benchmarks.resource_use [--nodes 1000]``; ``--json`` prints rows for
``benchmarks.run_all``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOAL_MIB = 300

_PRELUDE = textwrap.dedent(
    """
    import gc, json, sys, time, psutil
    import msgspec
    import coordinator.app.main, coordinator.app.web
    from common.podkeys import GPU_RESOURCE
    from coordinator.inventory.store import Inventory
    from coordinator.inventory.ingest import AgentSession, SessionRegistry
    from coordinator.inventory.translate import kube_node
    from coordinator.engine.view import ClusterView
    from coordinator.core.framework.cycle import schedule_one
    from coordinator.core.framework.results import Decision
    from coordinator.core.podspec.parse import parse_pod
    from coordinator.core.registry import build_framework
    proc = psutil.Process()
    def rss():
        gc.collect()
        return proc.memory_info().rss / 2**20
    N = int(sys.argv[1])
    def topologies():
        from agent.devices import discover_profile
        base = discover_profile("dgx-a100", hostname="template")
        for i in range(N):
            gpus = tuple(msgspec.structs.replace(g, uuid=f"GPU-{i:05d}-{g.index:02d}-7c1e")
                         for g in base.gpus)
            yield msgspec.structs.replace(base, hostname=f"gpu-{i:05d}", gpus=gpus)
    """
)

_FLOOR = "print(json.dumps({'rss': rss()}))"

_COORDINATOR = textwrap.dedent(
    """
    from common.wire import Hello, encode
    floor = rss()
    frames = [(t.hostname, encode(Hello(node=t.hostname, agent_version="bench",
               agent_id="a-" + t.hostname, seq=0, topology=t))) for t in topologies()]
    frame_bytes = sum(len(f) for _, f in frames)
    inv = Inventory(stale_ttl_s=3600)
    registry = SessionRegistry(inv)
    sessions = []
    t0 = time.perf_counter()
    for name, data in frames:
        s = AgentSession(inv, registry)
        s.receive(data)
        sessions.append(s)
        inv.upsert_node(kube_node({
            "metadata": {"name": name, "uid": "u-" + name,
                         "labels": {"kubernetes.io/hostname": name,
                                    "topos.io/leaf": "leaf-" + name[-2:]}},
            "spec": {},
            "status": {"allocatable": {"cpu": "256", "memory": "1Ti", "pods": "110",
                                        GPU_RESOURCE: "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
    ingest_s = time.perf_counter() - t0
    del frames
    loaded = rss()
    gpus = sum(len(n.topology.gpus) for n in inv.nodes() if n.topology)
    view = ClusterView(inv)
    snap = view.snapshot()
    fw = build_framework()
    placed = 0
    for i in range(1000):
        pod = parse_pod({"metadata": {"name": f"p{i}", "namespace": "bench"},
                         "spec": {"schedulerName": "topos", "containers": [{"name": "c",
                                  "resources": {"limits": {GPU_RESOURCE: "1"},
                                                "requests": {"cpu": "4", "memory": "16Gi"}}}]}})
        result = schedule_one(pod, snap, fw)
        if isinstance(result, Decision):
            view.assume(pod, result.node, result.placement)
            snap = view.snapshot()
            placed += 1
    scheduled = rss()
    print(json.dumps({"floor": floor, "loaded": loaded, "scheduled": scheduled, "placed": placed,
                      "gpus": gpus, "frame_bytes": frame_bytes, "ingest_s": ingest_s,
                      "nodes": len(sessions)}))
    """
)

_BASELINE = textwrap.dedent(
    """
    from common.model import topology_to_json
    floor = rss()
    store = {t.hostname: json.loads(topology_to_json(t)) for t in topologies()}
    print(json.dumps({"floor": floor, "loaded": rss(), "nodes": len(store)}))
    """
)


def _run(code: str, nodes: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _PRELUDE + code, str(nodes)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if out.returncode != 0:
        raise SystemExit(f"measurement failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    floor = _run(_FLOOR, args.nodes)["rss"]
    coord = _run(_COORDINATOR, args.nodes)
    base = _run(_BASELINE, args.nodes)
    n, gpus = coord["nodes"], coord["gpus"]
    inv_mib = coord["loaded"] - coord["floor"]
    base_mib = base["loaded"] - base["floor"]
    verdict = "OK" if coord["scheduled"] < GOAL_MIB else "MISSED"
    lines = [
        f"floor (coordinator imports, nothing loaded)   RSS {floor:7.1f} MiB",
        f"inventory of {n} nodes / {gpus} GPUs via hello   RSS {coord['loaded']:7.1f} MiB "
        f"(+{inv_mib:.1f} MiB, {inv_mib * 1024 / n:.0f} KiB/node; "
        f"hellos {coord['frame_bytes'] / n / 1024:.1f} KiB/node, "
        f"ingested in {coord['ingest_s']:.2f} s)",
        f"+ scheduler snapshot, {coord['placed']} pods decided and assumed   "
        f"RSS {coord['scheduled']:7.1f} MiB",
        f"baseline: same topologies as parsed JSON dicts   +{base_mib:.1f} MiB "
        f"({base_mib * 1024 / n:.0f} KiB/node)",
        f"goal RSS < {GOAL_MIB} MiB with {n} nodes: {verdict}",
    ]
    rows = [
        {
            "case": f"{n:,} nodes / {gpus:,} GPUs (DGX A100)",
            "figure": "coordinator RSS, inventory loaded (hello path)",
            "topos": f"{coord['loaded']:.0f} MiB (+{inv_mib:.0f} MiB over {floor:.0f} MiB floor)",
            "baseline": f"+{base_mib:.0f} MiB (topologies as JSON dicts)",
            "goal": f"< {GOAL_MIB} MiB",
        },
        {
            "case": f"{n:,} nodes, {coord['placed']} pods placed",
            "figure": "coordinator RSS with scheduler snapshot",
            "topos": f"{coord['scheduled']:.0f} MiB",
            "baseline": "",
            "goal": f"< {GOAL_MIB} MiB: {verdict}",
        },
    ]
    if args.json:
        print(json.dumps({"rows": rows, "notes": lines}))
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
