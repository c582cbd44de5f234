"""CPU the coordinator spends on each pod's watch events, in one process, no API server.

What a scheduler_perf pod (``pod-default.yaml``: one ``pause`` container asking 100m CPU and
500 MiB, port 80) costs as the two pod watches see it, each event one watch line of JSON as the
API server writes it (managed fields, KWOK's status), through the reflectors' own per-line path:

- **pending ADDED** — the pod created: the pending-pod watch (:mod:`~coordinator.adapters.kube.
  pending`) queues it;
- **bound** — the bind seen: the pending watch's ``MODIFIED`` (turned into a ``DELETED``: it
  leaves the queue) and the bound-pod watch's ``ADDED`` (the inventory counts it);
- **Running** — KWOK's status update: the pending watch's ``MODIFIED`` (dropped) and the
  bound-pod watch's ``MODIFIED`` (phase Running and a start time);
- **status** — one more status update (a condition's time moves): both watches.

``--nodes`` KWOK nodes (``node-default.yaml``: 4 CPUs, 32 GiB, 110 pods), the scheduler's
:class:`~coordinator.engine.view.ClusterView` subscribed to the inventory and its snapshot taken
after each pod's events (a scheduling cycle's); the garbage collector set as the coordinator sets
it after its first sync (``coordinator.app.collector.settle``). Process CPU µs per pod for each
step, ``--repeat`` rounds (a fresh inventory and queue each), median.

    .venv/bin/python -m benchmarks.pod_watch [--nodes 500] [--pods 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from common.kube import KubeClient
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.kube.pending import pending_watch
from coordinator.app.collector import settle
from coordinator.core.queue import SchedulingQueue
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory

STEPS = ("pending ADDED", "bound", "Running", "status")
_T0 = "2026-12-01T09:00:00Z"
_T1 = "2026-12-01T09:00:01Z"


def _node(i: int) -> dict[str, Any]:
    cap = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": f"node-{i}",
            "uid": f"node-uid-{i}",
            "resourceVersion": str(i + 1),
            "labels": {"kubernetes.io/hostname": f"node-{i}", "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {},
        "status": {
            "capacity": cap,
            "allocatable": dict(cap),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "phase": "Running",
        },
    }


_CREATED_FIELDS = {
    "f:metadata": {"f:generateName": {}},
    "f:spec": {
        "f:containers": {
            'k:{"name":"pause"}': {
                ".": {},
                "f:image": {},
                "f:imagePullPolicy": {},
                "f:name": {},
                "f:ports": {
                    ".": {},
                    'k:{"containerPort":80,"protocol":"TCP"}': {
                        ".": {},
                        "f:containerPort": {},
                        "f:protocol": {},
                    },
                },
                "f:resources": {
                    ".": {},
                    "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}},
                    "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}},
                },
                "f:terminationMessagePath": {},
                "f:terminationMessagePolicy": {},
            }
        },
        "f:dnsPolicy": {},
        "f:enableServiceLinks": {},
        "f:restartPolicy": {},
        "f:schedulerName": {},
        "f:securityContext": {},
        "f:terminationGracePeriodSeconds": {},
    },
}
_CONDITION_FIELDS: dict[str, Any] = {
    ".": {},
    "f:lastTransitionTime": {},
    "f:status": {},
    "f:type": {},
}
_KWOK_FIELDS: dict[str, Any] = {
    "f:status": {
        "f:conditions": {
            f'k:{{"type":"{t}"}}': _CONDITION_FIELDS
            for t in ("ContainersReady", "Initialized", "Ready")
        },
        "f:containerStatuses": {},
        "f:hostIP": {},
        "f:hostIPs": {},
        "f:phase": {},
        "f:podIP": {},
        "f:podIPs": {},
        "f:startTime": {},
    }
}


def _pod(i: int, rv: int, stage: str, nodes: int) -> dict[str, Any]:
    """Pod ``i`` as the API server writes it: ``pending``, ``bound``, ``running``, ``status``."""
    managed = [
        {
            "manager": "scheduler_perf",
            "operation": "Update",
            "apiVersion": "v1",
            "time": _T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": _CREATED_FIELDS,
        }
    ]
    if stage in ("running", "status"):
        managed.append(
            {
                "manager": "kwok",
                "operation": "Update",
                "apiVersion": "v1",
                "time": _T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": _KWOK_FIELDS,
                "subresource": "status",
            }
        )
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10.2",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {
                    "limits": {"cpu": "100m", "memory": "500Mi"},
                    "requests": {"cpu": "100m", "memory": "500Mi"},
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
    }
    if stage != "pending":
        spec["nodeName"] = f"node-{i % nodes}"
    spec.update(
        securityContext={},
        schedulerName="topos",
        tolerations=[
            {
                "key": f"node.kubernetes.io/{k}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for k in ("not-ready", "unreachable")
        ],
        priority=0,
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
    )
    status: dict[str, Any] = {"phase": "Pending"}
    if stage == "bound":
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _T0}
        ]
    elif stage in ("running", "status"):
        when = _T1 if stage == "running" else "2026-12-01T09:00:02Z"
        status = {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": when if t == "Ready" else _T1}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.1",
            "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": f"10.64.{i // 250}.{i % 250}",
            "podIPs": [{"ip": f"10.64.{i // 250}.{i % 250}"}],
            "startTime": _T1,
            "containerStatuses": [
                {
                    "name": "pause",
                    "state": {"running": {"startedAt": _T1}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.k8s.io/pause:3.10.2",
                    "imageID": "",
                    "started": True,
                }
            ],
        }
    status["qosClass"] = "Guaranteed"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"pod-{i:05d}",
            "generateName": "pod-",
            "namespace": "namespace-1",
            "uid": f"0b7f6c1e-{i:04x}-4d2a-9c1e-5a6b7c8d9e0f",
            "resourceVersion": str(rv),
            "creationTimestamp": _T0,
            "managedFields": managed,
        },
        "spec": spec,
        "status": status,
    }


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"type": kind, "object": obj})


def lines(pods: int, nodes: int) -> dict[str, list[tuple[str, bytes]]]:
    """Each step's lines, in the order served: ``(watch, line)``, watch ``pending``/``bound``."""
    out: dict[str, list[tuple[str, bytes]]] = {step: [] for step in STEPS}
    rv = 1000
    for i in range(pods):
        out["pending ADDED"].append(("pending", _line("ADDED", _pod(i, rv + i, "pending", nodes))))
    rv += pods
    for step, stage in (("bound", "bound"), ("Running", "running"), ("status", "status")):
        for i in range(pods):
            obj = _pod(i, rv + i, stage, nodes)
            out[step].append(("pending", _line("MODIFIED", obj)))
            kind = "ADDED" if stage == "bound" else "MODIFIED"
            out[step].append(("bound", _line(kind, obj)))
        rv += pods
    return out


def measure(pods: int, nodes: int, served: dict[str, list[tuple[str, bytes]]]) -> dict[str, float]:
    """CPU µs per pod of each step, one round from scratch."""
    inventory = Inventory()
    sync = KubeSync(KubeClient.__new__(KubeClient), inventory)  # handlers only: never run
    node_watch, pod_watch = sync._reflectors
    node_watch._handler.replace([_node(i) for i in range(nodes)])
    pod_watch._handler.replace([])
    view = ClusterView(inventory)
    view.snapshot()
    queue = SchedulingQueue()
    pending = pending_watch(KubeClient.__new__(KubeClient), queue)
    pending._handler.replace([])
    settle()  # as the coordinator after its first sync: what exists frozen, thresholds raised
    feed: dict[str, Callable[[bytes, str], str]] = {
        "pending": pending._event,
        "bound": pod_watch._event,
    }
    out: dict[str, float] = {}
    for step in STEPS:
        step_lines = served[step]
        per_pod = len(step_lines) // pods
        t0 = time.process_time()
        for n, (watch, line) in enumerate(step_lines):
            feed[watch](line, "0")
            if n % per_pod == per_pod - 1:
                view.snapshot()
        out[step] = 1e6 * (time.process_time() - t0) / pods
    assert len(queue) == 0, "every pod left the queue when bound"
    assert len(inventory.bound_pods(f"node-{0}")) == len(range(0, pods, nodes))
    out["total"] = sum(out[s] for s in STEPS)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    served = lines(args.pods, args.nodes)
    rounds = [measure(args.pods, args.nodes, served) for _ in range(args.repeat)]
    print(f"{args.pods} pods, {args.nodes} nodes, median of {args.repeat} rounds")
    for key in (*STEPS, "total"):
        values = [r[key] for r in rounds]
        print(
            f"{key:14s} {statistics.median(values):7.1f} µs CPU per pod "
            f"(rounds {', '.join(f'{v:.1f}' for v in values)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
