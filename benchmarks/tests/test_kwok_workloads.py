"""``benchmarks.kwok_workloads``: the KWOK fabric it builds, the Nodes it leaves free under
contention, how it counts slices and gangs, and — on the real control plane with the real JobSet,
LWS and KubeRay controllers — that its ``--quick`` run finishes and prints its figures beside
kube-scheduler's. Nothing here asserts a time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.kwok_cluster import Fabric, node_body, node_name
from benchmarks.kwok_workload_objects import Membership, membership
from benchmarks.kwok_workload_runs import (
    CONTROLLERS,
    FULL,
    Seen,
    count_slices,
    free_nodes,
    place_of,
)
from benchmarks.kwok_workloads import main
from devcluster.binaries import BinariesUnavailable, ensure
from devcluster.subprocess_env import subprocess_env
from devcluster.workloads import build
from devcluster.workloads.catalog import lookup

ROOT = Path(__file__).resolve().parents[2]


def test_the_full_fabric_is_16_leaves_of_62_or_63_nodes_with_nvlink_domains_inside_a_leaf() -> None:
    fabric = FULL.fabric
    leaves = Counter(fabric.leaf(i) for i in range(FULL.nodes))
    assert sorted(leaves) == list(range(16))
    assert set(leaves.values()) == {62, 63}
    cliques: dict[str, set[int]] = {}
    for i in range(FULL.nodes):
        cliques.setdefault(fabric.clique(i), set()).add(fabric.leaf(i))
    assert all(len(v) == 1 for v in cliques.values())  # no NVLink domain crosses a leaf
    body = node_body(70, fabric)
    labels = body["metadata"]["labels"]
    assert labels["topos.io/leaf"] == "leaf-1"
    assert labels["topos.io/spine"] == "spine-0"
    assert labels["nvidia.com/gpu.clique"] == "leaf-1-clique-0"  # leaf 1 starts at node 63
    assert "nvidia.com/gpu.clique" not in node_body(70)["metadata"]["labels"]  # the old layout


def test_contention_leaves_whole_nvlink_domains_free_spread_over_the_leaves() -> None:
    free = free_nodes(FULL, int(0.7 * FULL.demand()))
    assert len(free) == 160 < FULL.demand()
    fabric = FULL.fabric
    per_leaf = Counter(fabric.leaf(i) for i in free)
    assert sorted(per_leaf) == list(range(16))
    assert [per_leaf[leaf] for leaf in range(16)] == [16] * 4 + [8] * 12
    per_clique = Counter(fabric.clique(i) for i in free)
    assert set(per_clique.values()) == {8}  # whole domains


def test_slices_counted_inside_one_leaf_and_one_nvlink_domain() -> None:
    fabric = Fabric(nodes=32, leaves=2, clique_nodes=8)
    leaves, cliques = place_of(fabric)
    member = Membership("lws", "g", "g")
    other = Membership("lws", "h", "h")
    bound = [
        Seen(member, 8, 0.0, node_name(0)),
        Seen(member, 8, 0.0, node_name(7)),  # same NVLink domain
        Seen(other, 8, 0.0, node_name(8)),
        Seen(other, 8, 0.0, node_name(15 + 1)),  # another leaf
    ]
    assert count_slices(bound, leaves, cliques) == (2, 1, 1)


def test_pods_are_told_to_their_gang_by_the_controllers_labels() -> None:
    assert membership(
        {"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/job-index": "3"}
    ) == Membership("jobset", "jobset/train", "jobset/train/job-3")
    assert membership(
        {
            "leaderworkerset.sigs.k8s.io/name": "serve",
            "leaderworkerset.sigs.k8s.io/group-index": "5",
        }
    ) == Membership("lws", "lws/serve/5", "lws/serve/5")
    assert membership({"ray.io/cluster": "ray"}) == Membership("ray", "ray/ray", "ray/ray")
    assert membership({"app": "other"}) is None


def test_sizes_that_cannot_hold_the_workloads_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--nodes", "100"])
    assert "the workloads need 224 Nodes, more than --nodes 100" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--free", "224"])
    assert "--free 224: must leave fewer Nodes free than the 224" in capsys.readouterr().err


def _prerequisites() -> None:
    try:
        ensure(extra=True, log=False)
        for name in CONTROLLERS:
            build.ensure(lookup(name), log=False)
    except BinariesUnavailable as exc:
        reason = f"kube-scheduler, kwok or a workload controller unavailable: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.mark.kube
def test_quick_run_prints_each_figure_beside_kube_schedulers() -> None:
    _prerequisites()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.kwok_workloads", "--quick", "--quiet", "5", "--json"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = json.loads(done.stdout)
    rows = {(r["case"].split(", ")[2], r["figure"]): r for r in out["rows"]}
    seconds = re.compile(r"^\d+\.\d\d s \(\d+\.\d\d s\)")
    for what in (
        "JobSet of 16 × 8-GPU pods (2 Jobs)",
        "8 LWS groups of 4 × 8-GPU pods",
        "RayCluster of 1 + 8 8-GPU workers",
    ):
        bound = rows[what, "apply → all bound (last pod created → all bound)"]
        assert seconds.match(bound["topos"]), bound
        assert seconds.match(bound["baseline"]), bound
        assert "kube-scheduler v" in bound["baseline"], bound
        (sliced,) = (r for (w, f), r in rows.items() if w == what and "(asked)" in f)
        # Every slice inside the domain asked for, at the level asked (the LWS's: NVLink).
        in_leaf, in_clique = sliced["topos"].split(" / ")
        asked = in_clique if "NVLink domain (asked)" in sliced["figure"] else in_leaf
        got, total = asked.split("/")
        assert got == total, sliced
        assert int(total) > 0, sliced
    (contention,) = (r for (w, _), r in rows.items() if w == "the three at once")
    assert contention["topos"].startswith("0 (0 GPUs held); "), contention
    assert re.match(r"^\d+ \(\d+ GPUs held\); \d+ whole; \d+ pods", contention["baseline"])
    assert any(n.startswith("whole benchmark") for n in out["notes"])
