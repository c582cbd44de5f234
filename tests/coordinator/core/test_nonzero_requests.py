"""kube-scheduler's *non-zero* requests in NodeResourcesFit's scoring.

Scoring (LeastAllocated, MostAllocated) counts a container that requests no cpu as 100m and one
that requests no memory as 200 MiB (kube's ``NonMissingContainerRequests``), for the pod to place
and for the pods on the node (``NodeInfo.nonzero_requested``, kube's ``NonZeroRequested``); init
containers, sidecars, pod-level requests and the overhead count as in the real requests. Filtering
still counts the real requests. Without this, pods that request nothing scored every node alike
and all went to the first node by name (999 of 1,000 in upstream's EventHandlingPodAdd)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.podspec.resources import NonZero
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.inventory.translate import bound_pod
from devcluster.pods import pod
from tests.support.sched_hw import bound_info, place_all, plain_node, request, run

Mi = 2**20
Gi = 2**30
NONE = NonZero(100, 200 * Mi)  # a container that requests neither


def _c(requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests or {}}, **extra}


def _pod(spec: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"schedulerName": "topos", **spec},
        "status": {"phase": "Pending"},
    }


def _counted(obj: dict[str, Any]) -> tuple[NonZero, NonZero]:
    """(what scoring counts for the pod to place, what it adds to its node once bound), the
    second checked alike for the pod assumed and for the pod the inventory sees bound."""
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodRequest), parsed
    bound = bound_pod({**obj, "spec": {**obj["spec"], "nodeName": "n"}})
    info = bound_info(obj)
    assert bound is not None
    assert info is not None
    assert bound.nonzero == info.nonzero == parsed.nonzero_on_node
    return parsed.nonzero, parsed.nonzero_on_node


# --- the numbers ---------------------------------------------------------------------------------


def test_a_best_effort_pod_counts_100m_and_200mi_but_requests_nothing() -> None:
    obj = _pod({"containers": [_c()]})
    assert _counted(obj) == (NONE, NONE)
    assert request(obj).requests == {}


def test_each_container_without_a_request_counts_its_default() -> None:
    obj = _pod({"containers": [_c({"cpu": "1"}), _c({"memory": "1Gi"}), _c()]})
    expected = NonZero(1000 + 100 + 100, 200 * Mi + Gi + 200 * Mi)
    assert _counted(obj) == (expected, expected)


def test_a_request_written_as_zero_stays_zero() -> None:
    obj = _pod({"containers": [_c({"cpu": "0", "memory": "0"})]})
    assert _counted(obj) == (NonZero(0, 0), NonZero(0, 0))


def test_a_limit_without_a_request_is_the_request() -> None:
    obj = _pod({"containers": [{"name": "c", "resources": {"limits": {"cpu": "2"}}}]})
    assert _counted(obj)[0] == NonZero(2000, 200 * Mi)


def test_init_containers_count_their_peak_and_sidecars_run_beside_the_app() -> None:
    # An init container without requests runs alone: 100m, no more than the app's 100m.
    alone = _pod({"containers": [_c()], "initContainers": [_c()]})
    assert _counted(alone)[0] == NONE
    # A larger one sets the peak for what it requests; its memory is still the default.
    big = _pod({"containers": [_c()], "initContainers": [_c({"cpu": "2"})]})
    assert _counted(big)[0] == NonZero(2000, 200 * Mi)
    # A sidecar (restartPolicy Always) runs beside the app containers: both defaults add up.
    sidecar = _pod({"containers": [_c()], "initContainers": [_c(restartPolicy="Always")]})
    assert _counted(sidecar)[0] == NonZero(200, 400 * Mi)


def test_the_overhead_is_added() -> None:
    obj = _pod({"containers": [_c()], "overhead": {"cpu": "250m", "memory": "64Mi"}})
    assert _counted(obj)[0] == NonZero(350, 264 * Mi)


def test_pod_level_requests_replace_the_containers_defaults() -> None:
    obj = _pod({"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}, "containers": [_c()]})
    assert _counted(obj) == (NonZero(2000, Gi), NonZero(2000, Gi))


def test_pod_level_requests_that_leave_a_resource_to_the_containers() -> None:
    # kube's two rules part here: scoring the pod fills in each container's missing memory
    # (1 GiB + 200 MiB); the node's NonZeroRequested (PodInfo.CalculateResource) fills in none
    # once any container names memory (1 GiB), and would for cpu had the pod level not set it.
    obj = _pod(
        {
            "resources": {"requests": {"cpu": "2"}},
            "containers": [_c({"memory": "1Gi"}), _c()],
        }
    )
    assert _counted(obj) == (NonZero(2000, Gi + 200 * Mi), NonZero(2000, Gi))
    # No container names memory: both fill it in per container.
    bare = _pod({"resources": {"requests": {"cpu": "2"}}, "containers": [_c(), _c()]})
    assert _counted(bare) == (NonZero(2000, 400 * Mi), NonZero(2000, 400 * Mi))


# --- the score -----------------------------------------------------------------------------------


def _fit_scores(obj: dict[str, Any], snapshot: Snapshot, config: str = "") -> dict[str, float]:
    result = place_all([obj], snapshot, build_framework(load_config(config)))[0]
    assert isinstance(result, Decision), getattr(result, "message", result)
    return {n: v.scores["NodeResourcesFit"] for n, v in result.verdicts.items()}


def test_a_best_effort_pod_scores_nodes_by_100m_and_200mi() -> None:
    snapshot = Snapshot(
        [plain_node("busy", cpu=4, memory_gib=32), plain_node("idle", cpu=4, memory_gib=32)]
    )
    snapshot.assume(request(_pod({"containers": [_c()]}, name="there")), "busy", Placement())
    scores = _fit_scores(_pod({"containers": [_c()]}), snapshot)
    # LeastAllocated: the mean of the free shares after placing the pod, out of 100.
    busy = 100 * ((1 - 200 / 4000) + (1 - 400 * Mi / (32 * Gi))) / 2
    idle = 100 * ((1 - 100 / 4000) + (1 - 200 * Mi / (32 * Gi))) / 2
    assert scores == {"busy": pytest.approx(busy), "idle": pytest.approx(idle)}


def test_most_allocated_packs_request_less_pods() -> None:
    config = (
        "profiles: [{pluginConfig: [{name: NodeResourcesFit, "
        "args: {scoringStrategy: {type: MostAllocated}}}]}]"
    )
    snapshot = Snapshot([plain_node("a"), plain_node("b")])
    snapshot.assume(request(_pod({"containers": [_c()]}, name="there")), "b", Placement())
    scores = _fit_scores(_pod({"containers": [_c()]}), snapshot, config)
    assert scores["b"] > scores["a"]


def test_filtering_still_counts_the_real_requests() -> None:
    # Every CPU requested: a best-effort pod (requests nothing) still fits.
    full = plain_node("full", cpu=4, pods=[bound_info(pod("hog", cpu="4", node="full"))])
    result = run(_pod({"containers": [_c()]}), [full])
    assert isinstance(result, Decision), getattr(result, "message", result)


# --- what a user sees ----------------------------------------------------------------------------


def test_ten_request_less_pods_on_five_equal_nodes_are_spread() -> None:
    snapshot = Snapshot([plain_node(f"node-{i}") for i in range(5)])
    pods = [pod(f"web-{i}", cpu=None, memory=None) for i in range(10)]
    placed = [r.node for r in place_all(pods, snapshot) if isinstance(r, Decision)]
    assert sorted(placed) == sorted([f"node-{i}" for i in range(5)] * 2)


# --- the node's bookkeeping ----------------------------------------------------------------------


def test_the_node_counts_its_pods_alike_when_built_assumed_or_forgotten() -> None:
    pods = [bound_info(pod(f"p{i}", cpu=None, memory="1Gi", node="n")) for i in range(3)]
    assert all(p is not None for p in pods)
    built = plain_node("n", pods=pods)
    assert built.nonzero_requested == NonZero(300, 3 * Gi)
    snapshot = Snapshot([plain_node("n", pods=pods[:2])])
    snapshot.assume(request(pod("p2", cpu=None, memory="1Gi")), "n", Placement())
    assumed = snapshot.get("n")
    assert assumed is not None
    assert assumed.nonzero_requested == built.nonzero_requested
    snapshot.forget("default/p2")
    forgotten = snapshot.get("n")
    assert forgotten is not None
    assert forgotten.nonzero_requested == NonZero(200, 2 * Gi)


def test_nodes_alike_but_for_what_scoring_counts_do_not_share_scores() -> None:
    # Same real requests (none), different non-zero ones: never the same state token, so the
    # framework does not share one node's NodeResourcesFit score with the other.
    best_effort = bound_info(_pod({"containers": [_c()]}, name="be"), node="a")
    zeros = bound_info(_pod({"containers": [_c({"cpu": "0", "memory": "0"})]}, name="z"), node="b")
    a = plain_node("a", pods=[best_effort])
    b = plain_node("b", pods=[zeros])
    assert a.requested == b.requested
    assert a.state_key is not b.state_key
    scores = _fit_scores(_pod({"containers": [_c()]}), Snapshot([a, b]))
    assert scores["b"] > scores["a"]
