"""CPU the coordinator spends on watch events that change nothing the scheduler uses.

In one process, no API server: ``--nodes`` KWOK-like DGX H100 Node objects (the agent's labels
and ``topos.io/topology`` annotation, as ``benchmarks/kwok_cluster.py`` writes them) and one bound
single-GPU pod on each of ``--pods`` nodes are listed into the inventory through the API-server
sync's own handlers (:class:`coordinator.adapters.kube.inventory_sync.KubeSync`), with the
scheduler's :class:`~coordinator.engine.view.ClusterView` subscribed and its snapshot taken.
Then, timed (process CPU):

- **heartbeats** — one Node status update per node that moves only ``lastHeartbeatTime`` and
  the ``resourceVersion`` (what a kubelet or KWOK writes every few seconds), each handed to the
  handler as a watch ``MODIFIED`` event, then the snapshot taken again;
- **pod status** — each bound pod turning ``Running`` (phase, conditions, pod IP);
- **label change** — for comparison, a real change: a new label on every node.

Figures: CPU µs per event (JSON decoding of the event excluded: every client pays it) and
inventory events raised. ``--json`` prints rows for ``benchmarks.run_all``.

    .venv/bin/python -m benchmarks.watch_events [--nodes 5000] [--pods 3000]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from agent.devices import discover_profile
from benchmarks.kwok_cluster import PROFILE, node_body
from benchmarks.kwok_throughput import pod_body
from common.kube import KubeClient
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.kube.reflector import Handler
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory
from devcluster.nodes import capacity


def _nodes(count: int) -> list[dict[str, Any]]:
    cap = capacity(discover_profile(PROFILE, hostname="x"))
    out = []
    for i in range(count):
        body = node_body(i)
        body["metadata"]["resourceVersion"] = str(i + 1)
        body["status"] = {
            "capacity": cap,
            "allocatable": dict(cap),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-11-24T20:00:00Z",
                    "lastTransitionTime": "2026-11-24T19:00:00Z",
                }
            ],
        }
        out.append(body)
    return out


def _pods(count: int) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        body = pod_body(f"p-{i:05d}", "topos")
        body["metadata"].update(namespace="bench", uid=f"uid-{i}", resourceVersion=str(i + 1))
        body["spec"]["nodeName"] = f"kwok-gpu-{i:04d}"
        body["status"] = {"phase": "Pending"}
        out.append(body)
    return out


def _timed(
    handler: Handler, events: list[dict[str, Any]], view: ClusterView, counter: list[int]
) -> tuple[float, int]:
    """CPU µs per event (apply + the snapshot after), and inventory events raised."""
    raised = counter[0]
    t0 = time.process_time()
    for obj in events:
        handler.apply("MODIFIED", obj)
    view.snapshot()
    return 1e6 * (time.process_time() - t0) / max(1, len(events)), counter[0] - raised


def _changed(objs: list[dict[str, Any]], edit: Callable[[dict[str, Any], int], None]) -> list[Any]:
    out = []
    for i, obj in enumerate(objs):
        new = copy.deepcopy(obj)
        new["metadata"]["resourceVersion"] = str(100_000 + i)
        edit(new, i)
        out.append(new)
    return out


def _heartbeat(obj: dict[str, Any], _: int) -> None:
    obj["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-24T20:00:40Z"


def _running(obj: dict[str, Any], i: int) -> None:
    obj["status"] = {
        "phase": "Running",
        "podIP": f"10.64.{i // 250}.{i % 250}",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "main", "ready": True, "state": {"running": {}}}],
    }


def _labelled(obj: dict[str, Any], _: int) -> None:
    obj["metadata"]["labels"]["bench/changed"] = "yes"


def measure(nodes: int, pods: int) -> dict[str, tuple[float, int]]:
    inventory = Inventory()
    raised = [0]
    inventory.subscribe(lambda _: raised.__setitem__(0, raised[0] + 1))
    sync = KubeSync(KubeClient.__new__(KubeClient), inventory)  # handlers only: never run
    node_handler, pod_handler = (r._handler for r in sync._reflectors)
    node_objs, pod_objs = _nodes(nodes), _pods(pods)
    t0 = time.process_time()
    node_handler.replace(node_objs)
    pod_handler.replace(pod_objs)
    listed = time.process_time() - t0
    view = ClusterView(inventory)
    view.snapshot()
    out = {"list (per object)": (1e6 * listed / (nodes + pods), 0)}
    out["heartbeat"] = _timed(node_handler, _changed(node_objs, _heartbeat), view, raised)
    out["pod status"] = _timed(pod_handler, _changed(pod_objs, _running), view, raised)
    out["label change"] = _timed(node_handler, _changed(node_objs, _labelled), view, raised)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    figures = measure(args.nodes, args.pods)
    lines = [
        f"{what:18s} {us:8.1f} µs CPU per event, {events:5d} inventory events raised"
        for what, (us, events) in figures.items()
    ]
    if args.json:
        print(json.dumps({"rows": [], "notes": lines}))
    else:
        print(f"{args.nodes} nodes, {args.pods} bound pods")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
