"""The differently shaped requests what-if tries (``engine/whatif/variants.py``) and how its
suggestions rank: looser keys first in order of how little they give up, fewer GPUs per pod with
the workload's gpu-count scaled alike, the pod objects themselves never changed."""

from __future__ import annotations

import copy

from coordinator.engine.whatif.service import TIERS
from coordinator.engine.whatif.variants import gpus_per_pod, relaxations, with_gpus
from devcluster.pods import pod


def test_locality_relaxes_one_step_at_a_time_then_numa_then_domains() -> None:
    obj = pod(
        "p",
        gpus=8,
        annotations={
            "topos.io/gpu-locality": "nvlink",
            "topos.io/numa-policy": "single-numa",
            "topos.io/latency-sensitive": "true",
        },
    )
    before = copy.deepcopy(obj)
    changes = list(relaxations([obj]))
    assert [(c.kind, dict(c.change), c.steps) for c in changes] == [
        ("relax-locality", {"topos.io/gpu-locality": "same-socket"}, 1),
        ("relax-locality", {"topos.io/gpu-locality": "same-node"}, 2),
        ("relax-locality", {"topos.io/gpu-locality": "any"}, 3),
        ("relax-numa", {"topos.io/numa-policy": "best-effort"}, 1),
        ("span-domains", {"topos.io/latency-sensitive": ""}, 1),
    ]
    assert changes[0].summary == "ask for topos.io/gpu-locality: same-socket instead of nvlink"
    relaxed = changes[0].apply(obj)
    assert relaxed["metadata"]["annotations"]["topos.io/gpu-locality"] == "same-socket"
    spanned = changes[4].apply(obj)
    assert "topos.io/latency-sensitive" not in spanned["metadata"]["annotations"]
    assert obj == before  # the user's objects are never changed


def test_the_loosest_values_offer_nothing() -> None:
    obj = pod("p", gpus=1, annotations={"topos.io/gpu-locality": "any"})
    assert list(relaxations([obj])) == []
    assert list(relaxations([pod("q", gpus=1)])) == []


def test_fewer_gpus_sets_limits_and_requests_and_scales_gpu_count() -> None:
    obj = pod("p", gpus=8, annotations={"topos.io/gpu-count": "32"})
    obj["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "8"}
    assert gpus_per_pod(obj) == 8
    change = with_gpus(8, 7)
    assert change.summary == "ask for 7 GPUs per pod instead of 8"
    assert dict(change.change) == {"nvidia.com/gpu": "7"}
    smaller = change.apply(obj)
    resources = smaller["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 7
    assert resources["requests"]["nvidia.com/gpu"] == 7
    assert smaller["metadata"]["annotations"]["topos.io/gpu-count"] == "28"  # 4 pods × 7
    assert gpus_per_pod(obj) == 8


def test_suggestions_rank_own_changes_before_fewer_gpus_before_others_pods_before_admins() -> None:
    assert TIERS["relax-locality"] == TIERS["relax-numa"] == TIERS["span-domains"] == 0
    assert TIERS["relax-locality"] < TIERS["fewer-gpus"] < TIERS["preempt"] < TIERS["uncordon"]
