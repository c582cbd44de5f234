"""The pods of the KWOK benchmark (``benchmarks/kwok_throughput.py``), one body per workload: a
single GPU; the same with required pod anti-affinity or a hard spread (``mixed``); 8 GPUs as a
member of one Topos gang (``gang``)."""

from __future__ import annotations

from typing import Any

from common.podkeys import GPU_RESOURCE

#: ``--workload mixed``: as kube's scheduler_perf ``SchedulingPodAntiAffinity`` (no two such pods
#: on one node, required) and ``TopologySpreading`` (spread over the leaves, skew at most 1, hard),
#: alternately, on top of the single GPU.
_ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"kind": "anti"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}
_SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topos.io/leaf",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"kind": "spread"}},
    }
]


def pod_body(
    name: str, scheduler_name: str, *, workload: str = "gpu", index: int = 0, size: int = 0
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    labels = {"app": "kwok-bench"}
    gpus = "1"
    if workload == "gang":  # every pod a member of one gang needing them all (whole nodes)
        labels.update({"topos.io/gang": "bench", "topos.io/gang-min": str(size)})
        gpus = "8"
    elif workload == "mixed" and index % 2 == 0:
        labels["kind"] = "anti"
        extra["affinity"] = _ANTI
    elif workload == "mixed":
        labels["kind"] = "spread"
        extra["topologySpreadConstraints"] = _SPREAD
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            **extra,
            "schedulerName": scheduler_name,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi"},
                        "limits": {GPU_RESOURCE: gpus},
                    },
                }
            ],
        },
    }
