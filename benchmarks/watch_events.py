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
inventory events raised. Then the same events as the API server sends them — one watch line of
JSON each, pods with their ``managedFields`` and a KWOK-like status — through the reflectors' own
per-line path (decoding included), and the pending-pod watch's ``DELETED`` when a pod is bound.
``--json`` prints rows for ``benchmarks.run_all``.

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

import msgspec

from agent.devices import discover_profile
from benchmarks.kwok_cluster import PROFILE, node_body
from benchmarks.kwok_pods import pod_body
from common.kube import KubeClient
from common.kube.watch import parse_watch_line
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.kube.pending import pending_watch
from coordinator.adapters.kube.reflector import Handler, Reflector
from coordinator.core.queue import SchedulingQueue
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


_MANAGED = [
    {
        "manager": "topos",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-11-24T20:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:containers": {'k:{"name":"main"}': {".": {}, "f:image": {}, "f:name": {}}},
                "f:schedulerName": {},
            },
        },
    },
    {
        "manager": "kwok",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-11-24T20:00:01Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:status": {
                "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}},
                "f:containerStatuses": {},
                "f:hostIP": {},
                "f:phase": {},
                "f:podIP": {},
                "f:startTime": {},
            }
        },
        "subresource": "status",
    },
]


def _as_served(pod: dict[str, Any], i: int) -> dict[str, Any]:
    """A bound pod as a watch event carries it once KWOK has made it Running."""
    new = copy.deepcopy(pod)
    new["metadata"].update(
        creationTimestamp="2026-11-24T20:00:00Z", managedFields=copy.deepcopy(_MANAGED)
    )
    new["status"] = {
        "phase": "Running",
        "hostIP": "10.0.0.1",
        "podIP": f"10.64.{i // 250}.{i % 250}",
        "startTime": "2026-11-24T20:00:01Z",
        "qosClass": "Burstable",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": "2026-11-24T20:00:01Z"}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
        ],
        "containerStatuses": [
            {
                "name": "main",
                "ready": True,
                "restartCount": 0,
                "image": "registry.example/train:1",
                "imageID": "",
                "started": True,
                "state": {"running": {"startedAt": "2026-11-24T20:00:01Z"}},
            }
        ],
    }
    return new


def _lines(kind: str, objs: list[dict[str, Any]]) -> list[bytes]:
    return [msgspec.json.encode({"type": kind, "object": obj}) + b"\n" for obj in objs]


def _feed(reflector: Reflector, lines: list[bytes]) -> float:
    """CPU µs per line through the reflector's per-line path (decoding included)."""
    event = getattr(reflector, "_event", None)
    t0 = time.process_time()
    if event is not None:
        for line in lines:
            event(line, "0")
    else:  # a tree before Reflector._event: what its watch loop did per line
        for line in lines:
            kind, obj = parse_watch_line(line, reflector.resource)
            slim = reflector._slim
            reflector._handler.apply(kind, obj if slim is None else slim(obj))  # type: ignore[arg-type]
    return 1e6 * (time.process_time() - t0) / max(1, len(lines))


def measure_decoded(nodes: int, pods: int) -> dict[str, tuple[float, int]]:
    """Per watch line as served: two rounds of heartbeats, bound pods going Running then three
    more status updates each, and the pending watch's ``DELETED`` when a pod is bound. "(1st)":
    the first event of each object after the list."""
    inventory = Inventory()
    raised = [0]
    inventory.subscribe(lambda _: raised.__setitem__(0, raised[0] + 1))
    sync = KubeSync(KubeClient.__new__(KubeClient), inventory)
    node_watch, pod_watch = sync._reflectors
    node_objs, pod_objs = _nodes(nodes), _pods(pods)
    node_watch._handler.replace(node_objs)
    pod_watch._handler.replace(pod_objs)
    ClusterView(inventory).snapshot()
    out: dict[str, tuple[float, int]] = {}
    before = raised[0]
    beats = _lines("MODIFIED", _changed(node_objs, _heartbeat))
    out["heartbeat, decoded (1st)"] = (_feed(node_watch, beats), raised[0] - before)
    before = raised[0]
    again = _changed(node_objs, _heartbeat)
    for i, obj in enumerate(again):
        obj["metadata"]["resourceVersion"] = str(300_000 + i)
        obj["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-24T20:00:50Z"
    out["heartbeat, decoded"] = (_feed(node_watch, _lines("MODIFIED", again)), raised[0] - before)
    served = [_as_served(p, i) for i, p in enumerate(pod_objs)]
    # the bound pod arrives (ADDED), then status updates move only the status and the rv
    updates: list[dict[str, Any]] = []
    for step in range(3):
        for obj in _changed(served, lambda o, i: None):
            obj["metadata"]["resourceVersion"] = str(200_000 + step * pods + len(updates))
            obj["status"]["conditions"][step]["status"] = "False"
            updates.append(obj)
    before = raised[0]
    first = _feed(pod_watch, _lines("MODIFIED", served))
    out["pod Running, decoded (1st)"] = (first, raised[0] - before)
    before = raised[0]
    out["pod status, decoded"] = (_feed(pod_watch, _lines("MODIFIED", updates)), raised[0] - before)
    queue = SchedulingQueue()
    pending = pending_watch(KubeClient.__new__(KubeClient), queue)
    unbound = []
    for p in served:
        q = copy.deepcopy(p)
        q["spec"].pop("nodeName")
        q["status"] = {"phase": "Pending"}
        unbound.append(q)
    pending._handler.replace(unbound)
    out["pending DELETED, decoded"] = (_feed(pending, _lines("DELETED", unbound)), 0)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    figures = measure(args.nodes, args.pods)
    figures.update(measure_decoded(args.nodes, args.pods))
    lines = [
        f"{what:26s} {us:8.1f} µs CPU per event, {events:5d} inventory events raised"
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
