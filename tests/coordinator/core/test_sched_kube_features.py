"""Kubernetes scheduling features honoured for Topos pods, as kube-scheduler honours them.

Covers the scenarios of the user-defined-scheduling guide among the seeds (GPU-type
nodeSelector, zone spreading with anti-affinity, co-location with a cache, dedicated tainted
nodes, priority classes, the combined LLM example) plus the edges of each feature: operators,
symmetry of anti-affinity, the "first pod of a self-affine group" rule, topology spread skew and
minDomains, cordoned and NotReady nodes, resource fit including pods bound by other schedulers.
The manifests are this project's own, with the same semantics.
"""

from __future__ import annotations

import pytest

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Code
from devcluster.pods import host_port, pod, yaml_pod
from tests.support.outcomes import decided
from tests.support.sched_hw import (
    bound_info,
    dgx_a100,
    dgx_h100,
    gpu_node,
    place_all,
    plain_node,
    request,
    run,
    running,
)


def failed(result: object) -> Failure:
    assert isinstance(result, Failure), result
    return result


# --- nodeSelector on GPU type (guide: "Schedule to H100 nodes only") -------------------------

LLAMA_H100 = """
metadata: {name: llama-70b-h100-0, labels: {app: llama-70b}}
spec:
  nodeSelector:
    nvidia.com/gpu.product: H100
  containers:
  - name: vllm
    image: vllm/vllm-openai:latest
    resources:
      limits:
        nvidia.com/gpu: "4"
"""


def _h100_cluster() -> list:
    return [
        gpu_node("a100-1", dgx_a100("a100-1"), labels={"nvidia.com/gpu.product": "A100"}),
        gpu_node("h100-1", dgx_h100("h100-1"), labels={"nvidia.com/gpu.product": "H100"}),
        gpu_node("a100-2", dgx_a100("a100-2"), labels={"nvidia.com/gpu.product": "A100"}),
    ]


def test_node_selector_sends_replicas_only_to_matching_gpu_type() -> None:
    snapshot = Snapshot(_h100_cluster())
    replicas = [yaml_pod(LLAMA_H100.replace("-0", f"-{i}")) for i in range(3)]
    first, second, third = place_all(replicas, snapshot)
    assert decided(first).node == "h100-1"
    assert decided(second).node == "h100-1"
    assert set(decided(first).placement.gpus).isdisjoint(decided(second).placement.gpus)
    # The third replica can't fit: the H100 node is full and the others have the wrong label.
    assert failed(third).message == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    assert failed(third).statuses["a100-1"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert failed(third).statuses["h100-1"].code is Code.UNSCHEDULABLE
    assert not failed(third).unresolvable  # preemption on h100-1 could help


# --- node affinity: required In + preferred weight ---------------------------------------------

NODE_AFFINITY = """
metadata: {name: picky}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.product, operator: In, values: [H100, A100-80GB]}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        preference:
          matchExpressions:
          - {key: node.kubernetes.io/instance-type, operator: In, values: [p4d.24xlarge]}
  containers:
  - name: main
    image: x
    resources: {limits: {nvidia.com/gpu: 1}}
"""


def test_required_node_affinity_filters_and_preferred_term_wins_the_tie() -> None:
    nodes = [
        gpu_node("t4", dgx_a100("t4"), labels={"nvidia.com/gpu.product": "T4"}),
        gpu_node("a", dgx_a100("a"), labels={"nvidia.com/gpu.product": "A100-80GB"}),
        gpu_node(
            "p4d",
            dgx_a100("p4d"),
            labels={
                "nvidia.com/gpu.product": "A100-80GB",
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
            },
        ),
    ]
    result = decided(run(yaml_pod(NODE_AFFINITY), nodes))
    assert result.node == "p4d"
    assert result.verdicts["t4"].status.reasons == (
        "node(s) didn't match Pod's node affinity/selector",
    )
    assert result.breakdown["NodeAffinity"] > result.verdicts["a"].scores.get("NodeAffinity", 0)


@pytest.mark.parametrize(
    ("expression", "matching"),
    [
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, {"n8"}),
        ({"key": "gpus", "operator": "Lt", "values": ["8"]}, {"n4"}),
        ({"key": "tier", "operator": "NotIn", "values": ["spot"]}, {"n4", "bare"}),
        ({"key": "tier", "operator": "Exists"}, {"n8"}),
        ({"key": "tier", "operator": "DoesNotExist"}, {"n4", "bare"}),
    ],
)
def test_node_affinity_operators(expression: dict, matching: set[str]) -> None:
    nodes = [
        plain_node("n8", labels={"gpus": "8", "tier": "spot"}),
        plain_node("n4", labels={"gpus": "4"}),
        plain_node("bare", labels={"gpus": "many"}),  # Gt/Lt on a non-integer label: no match
    ]
    obj = pod(
        "p",
        spec={
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [expression]}]
                    }
                }
            }
        },
    )
    result = run(obj, nodes)
    feasible = {n for n, v in result.verdicts.items() if v.status.is_success}
    assert feasible == matching


def test_match_fields_on_node_name_and_ored_terms() -> None:
    nodes = [plain_node("a"), plain_node("b"), plain_node("c", labels={"rack": "r9"})]
    obj = pod(
        "p",
        spec={
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["b"]}
                                ]
                            },
                            {"matchExpressions": [{"key": "rack", "operator": "Exists"}]},
                        ]
                    }
                }
            }
        },
    )
    result = run(obj, nodes)
    assert {n for n, v in result.verdicts.items() if v.status.is_success} == {"b", "c"}


# --- pod anti-affinity across zones (guide: "Spread across zones") --------------------------

MULTI_ZONE = """
metadata:
  name: llama-mz-{i}
  labels: {{app: llama-3-70b-multi-zone}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: topology.kubernetes.io/zone
        labelSelector:
          matchExpressions:
          - {{key: app, operator: In, values: [llama-3-70b-multi-zone]}}
  containers:
  - name: vllm
    image: vllm
    resources: {{limits: {{nvidia.com/gpu: "1"}}}}
"""


def _zoned() -> list:
    return [
        gpu_node(f"{z}-{k}", dgx_h100(f"{z}-{k}"), labels={"topology.kubernetes.io/zone": z})
        for z in ("us-a", "us-b", "us-c")
        for k in (1, 2)
    ]


def test_required_anti_affinity_puts_each_replica_in_its_own_zone() -> None:
    snapshot = Snapshot(_zoned())
    results = place_all([yaml_pod(MULTI_ZONE.format(i=i)) for i in range(4)], snapshot)
    zones = [
        snapshot.get(decided(r).node).labels["topology.kubernetes.io/zone"] for r in results[:3]
    ]
    assert sorted(zones) == ["us-a", "us-b", "us-c"]
    # Like kube-scheduler, the pod's own anti-affinity is checked before the existing
    # replicas' (symmetric) terms.
    assert failed(results[3]).message == (
        "0/6 nodes are available: 6 node(s) didn't match pod anti-affinity rules."
    )


def test_existing_pods_anti_affinity_is_symmetric() -> None:
    """A pod without any affinity may not join a zone whose pod refuses it."""
    snapshot = Snapshot(_zoned())
    place_all([yaml_pod(MULTI_ZONE.format(i=0))], snapshot)
    taken = next(n.name for n in snapshot.nodes if n.pods)
    zone = snapshot.get(taken).labels["topology.kubernetes.io/zone"]
    newcomer = pod("plain", labels={"app": "llama-3-70b-multi-zone"})
    result = decided(schedule_one(newcomer, snapshot, build_framework()))
    assert snapshot.get(result.node).labels["topology.kubernetes.io/zone"] != zone
    for name in (f"{zone}-1", f"{zone}-2"):
        assert result.verdicts[name].status.reasons == (
            "node(s) didn't satisfy existing pods anti-affinity rules",
        )
    # Without the matching label it may go anywhere.
    other = decided(schedule_one(pod("other"), snapshot, build_framework()))
    assert other.feasible == 6


# --- pod affinity: co-locate with a cache -----------------------------------------------------

WITH_CACHE = """
metadata: {name: model-server, labels: {app: model-server}}
spec:
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchExpressions:
          - {key: app, operator: In, values: [redis-cache]}
        topologyKey: kubernetes.io/hostname
  containers:
  - {name: main, image: x, resources: {limits: {nvidia.com/gpu: 2}}}
"""


def test_pod_affinity_colocates_with_the_cache() -> None:
    cache = pod("redis", labels={"app": "redis-cache"})
    nodes = [
        gpu_node("g1", dgx_h100("g1")),
        gpu_node("g2", dgx_h100("g2"), pods=[running(cache)]),
        gpu_node("g3", dgx_h100("g3")),
    ]
    assert decided(run(yaml_pod(WITH_CACHE), nodes)).node == "g2"


def test_pod_affinity_without_any_cache_pending() -> None:
    nodes = [gpu_node("g1", dgx_h100("g1")), gpu_node("g2", dgx_h100("g2"))]
    assert failed(run(yaml_pod(WITH_CACHE), nodes)).message == (
        "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
    )


def test_first_pod_of_a_self_affine_group_may_go_anywhere_then_the_rest_follow() -> None:
    group = """
metadata: {{name: w{i}, labels: {{job: j1}}}}
spec:
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {{matchLabels: {{job: j1}}}}
        topologyKey: topology.kubernetes.io/zone
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]
"""
    snapshot = Snapshot(_zoned())
    results = place_all([yaml_pod(group.format(i=i)) for i in range(3)], snapshot)
    zones = {snapshot.get(decided(r).node).labels["topology.kubernetes.io/zone"] for r in results}
    assert len(zones) == 1


def test_namespace_selector_and_namespaces_limit_which_pods_count() -> None:
    cache = pod("redis", labels={"app": "redis-cache"}, namespace="infra")
    nodes = [plain_node("n1"), plain_node("n2", pods=[running(cache)])]
    term = {
        "labelSelector": {"matchLabels": {"app": "redis-cache"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    same_ns = pod(
        "p",
        spec={
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        },
    )
    # Default: only the pod's own namespace counts, and the cache is in "infra".
    assert isinstance(run(same_ns, nodes), Failure)
    by_selector = pod(
        "p",
        spec={
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {**term, "namespaceSelector": {"matchLabels": {"team": "platform"}}}
                    ]
                }
            }
        },
    )
    namespaces = {"infra": {"team": "platform"}, "default": {}}
    assert decided(run(by_selector, nodes, namespaces=namespaces)).node == "n2"
    by_list = pod(
        "p",
        spec={
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {**term, "namespaces": ["infra"]}
                    ]
                }
            }
        },
    )
    assert decided(run(by_list, nodes)).node == "n2"


# --- taints and tolerations (guide: dedicated nodes) -------------------------------------------

TOLERATES = """
metadata: {name: gpu-job}
spec:
  tolerations:
  - {key: gpu-only, operator: Equal, value: "true", effect: NoSchedule}
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def test_dedicated_node_taint_keeps_others_off() -> None:
    dedicated = gpu_node(
        "node-1", dgx_h100("node-1"), taints=[Taint("gpu-only", "true", "NoSchedule")]
    )
    intolerant = pod("web", gpus=1)
    result = failed(run(intolerant, [dedicated]))
    # kube-scheduler 1.33 counts the generic reason; which taint is kept for explanations.
    assert result.message == "0/1 nodes are available: 1 node(s) had untolerated taint(s)."
    assert result.statuses["node-1"].detail == "untolerated taint {gpu-only: true}"
    assert result.unresolvable
    assert decided(run(yaml_pod(TOLERATES), [dedicated])).node == "node-1"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "gpu-only", "operator": "Equal", "value": "false", "effect": "NoSchedule"}, False),
        ({"key": "gpu-only", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "gpu-only", "operator": "Exists"}, True),  # any effect
        ({"key": "gpu-only", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),  # empty key + Exists tolerates everything
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_matching(toleration: dict, tolerated: bool) -> None:
    node = plain_node("n", taints=[Taint("gpu-only", "true", "NoSchedule")])
    result = run(pod("p", spec={"tolerations": [toleration]}), [node])
    assert isinstance(result, Decision) is tolerated


def test_no_execute_taints_filter_and_prefer_no_schedule_only_scores() -> None:
    nodes = [
        plain_node("evicting", taints=[Taint("maint", "", "NoExecute")]),
        plain_node("soft", taints=[Taint("busy", "yes", "PreferNoSchedule")]),
        plain_node("clean"),
    ]
    result = decided(run(pod("p"), nodes))
    assert result.node == "clean"
    assert result.verdicts["evicting"].status.reasons == ("node(s) had untolerated taint(s)",)
    assert result.verdicts["evicting"].status.detail == "untolerated taint {maint: }"
    assert result.verdicts["soft"].status.is_success
    assert result.verdicts["soft"].scores["TaintToleration"] < result.breakdown["TaintToleration"]
    # Only the soft node left: it is used.
    assert decided(run(pod("p"), nodes[:2])).node == "soft"


def test_cordoned_and_not_ready_nodes() -> None:
    nodes = [
        plain_node("cordoned", unschedulable=True),
        plain_node("down", ready=False),
    ]
    result = failed(run(pod("p"), nodes))
    assert result.message == (
        "0/2 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable."
    )
    tolerant = pod(
        "ds",
        spec={
            "tolerations": [
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            ]
        },
    )
    assert decided(run(tolerant, nodes[:1])).node == "cordoned"
    assert decided(run(tolerant, nodes[1:])).node == "down"


# --- the combined LLM example ------------------------------------------------------------------

COMBINED = """
metadata: {name: llm-prod}
spec:
  priority: 1000000
  priorityClassName: high-priority-gpu
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.product, operator: In, values: [H100]}
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchExpressions:
          - {key: app, operator: In, values: [prometheus]}
        topologyKey: kubernetes.io/hostname
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          labelSelector:
            matchExpressions:
            - {key: app, operator: In, values: [model-serving]}
          topologyKey: kubernetes.io/hostname
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  containers:
  - {name: vllm, image: vllm, resources: {limits: {nvidia.com/gpu: 2}}}
"""


def test_combined_llm_example() -> None:
    gpu_taint = [Taint("nvidia.com/gpu", "present", "NoSchedule")]
    prom = running(pod("prom", labels={"app": "prometheus"}))
    prom2 = running(pod("prom2", labels={"app": "prometheus"}))
    serving = running(pod("old-model", labels={"app": "model-serving"}))
    h100 = {"nvidia.com/gpu.product": "H100"}
    nodes = [
        gpu_node("h100-a", dgx_h100("h100-a"), labels=h100, taints=gpu_taint),  # no prometheus
        gpu_node("h100-b", dgx_h100("h100-b"), labels=h100, taints=gpu_taint, pods=[prom, serving]),
        gpu_node("h100-c", dgx_h100("h100-c"), labels=h100, taints=gpu_taint, pods=[prom2]),
        gpu_node("a100-d", dgx_a100("a100-d"), labels={"nvidia.com/gpu.product": "A100"}),
    ]
    obj = yaml_pod(COMBINED)
    assert request(obj).priority == 1000000
    result = decided(run(obj, nodes))
    assert result.node == "h100-c"
    assert len(result.placement.gpus) == 2
    assert result.verdicts["h100-a"].status.reasons == ("node(s) didn't match pod affinity rules",)
    assert result.verdicts["a100-d"].status.reasons == (
        "node(s) didn't match Pod's node affinity/selector",
    )
    assert result.verdicts["h100-b"].status.is_success  # preferred only: allowed, scored lower
    assert result.verdicts["h100-b"].total < result.score


# --- topology spread constraints -----------------------------------------------------------------


def _spread_pod(
    name: str, *, when: str = "DoNotSchedule", max_skew: int = 1, **extra: object
) -> dict:
    constraint = {
        "maxSkew": max_skew,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "web"}},
        **extra,
    }
    return pod(name, labels={"app": "web"}, spec={"topologySpreadConstraints": [constraint]})


def _two_zones(a_pods: int, b_pods: int) -> list:
    web = lambda i: running(pod(f"web-{i}", labels={"app": "web"}))  # noqa: E731
    return [
        plain_node(
            "a1", labels={"topology.kubernetes.io/zone": "a"}, pods=[web(i) for i in range(a_pods)]
        ),
        plain_node(
            "b1",
            labels={"topology.kubernetes.io/zone": "b"},
            pods=[web(10 + i) for i in range(b_pods)],
        ),
        plain_node("nolabel"),
    ]


def test_spread_do_not_schedule_enforces_max_skew() -> None:
    result = decided(run(_spread_pod("new"), _two_zones(2, 1)))
    assert result.node == "b1"
    assert result.verdicts["a1"].status.reasons == (
        "node(s) didn't match pod topology spread constraints",
    )
    assert result.verdicts["nolabel"].status.reasons == (
        "node(s) didn't match pod topology spread constraints (missing required label)",
    )
    assert result.verdicts["nolabel"].status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    # maxSkew 2 allows the fuller zone again
    assert run(_spread_pod("new", max_skew=2), _two_zones(2, 1)).verdicts["a1"].status.is_success


def test_spread_min_domains_counts_missing_domains_as_empty() -> None:
    # Two zones exist but three are wanted: the global minimum is 0, so a zone already holding
    # a matching pod is over the skew of 1.
    result = failed(run(_spread_pod("new", minDomains=3), _two_zones(1, 1)[:2]))
    assert result.message == (
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints."
    )


def test_spread_schedule_anyway_prefers_the_emptier_zone_but_never_blocks() -> None:
    result = decided(run(_spread_pod("new", when="ScheduleAnyway"), _two_zones(3, 0)[:2]))
    assert result.node == "b1"
    only_full = decided(run(_spread_pod("new", when="ScheduleAnyway"), _two_zones(3, 0)[:1]))
    assert only_full.node == "a1"


def test_spread_honours_node_affinity_policy_when_counting() -> None:
    # Zone b's only node is excluded by the pod's nodeSelector, so zone b is not a domain and the
    # skew is measured among zone a and c only.
    web = lambda i: running(pod(f"w{i}", labels={"app": "web"}))  # noqa: E731
    nodes = [
        plain_node("a1", labels={"topology.kubernetes.io/zone": "a", "pool": "x"}, pods=[web(1)]),
        plain_node("b1", labels={"topology.kubernetes.io/zone": "b"}),
        plain_node("c1", labels={"topology.kubernetes.io/zone": "c", "pool": "x"}, pods=[web(2)]),
    ]
    obj = _spread_pod("new")
    obj["spec"]["nodeSelector"] = {"pool": "x"}
    result = decided(run(obj, nodes))
    assert result.node in ("a1", "c1")
    ignore = _spread_pod("new", nodeAffinityPolicy="Ignore")
    ignore["spec"]["nodeSelector"] = {"pool": "x"}
    # Counting zone b (empty) makes min 0: both a and c are now over the skew.
    assert isinstance(run(ignore, nodes), Failure)


# --- resource fit -----------------------------------------------------------------------------


def test_resource_fit_counts_pods_of_other_schedulers_and_reports_every_short_resource() -> None:
    other = pod("legacy", cpu="60", memory="200Gi", gpus=7)
    other["spec"]["schedulerName"] = "default-scheduler"
    node = gpu_node("g", dgx_h100("g"), cpu=64, memory_gib=256, pods=[running(other)])
    result = failed(run(pod("p", cpu="8", memory="64Gi", gpus=2), [node]))
    assert result.statuses["g"].reasons == (
        "Insufficient cpu",
        "Insufficient memory",
        "Insufficient nvidia.com/gpu",
    )
    assert decided(run(pod("p", cpu="4", memory="56Gi", gpus=1), [node])).node == "g"


def test_too_many_pods_ephemeral_storage_and_extended_resources() -> None:
    full = plain_node("full", extra={"pods": 1}, pods=[running(pod("x"))])
    assert failed(run(pod("p"), [full])).statuses["full"].reasons == ("Too many pods",)
    obj = pod("p")
    obj["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "600Gi"
    obj["spec"]["containers"][0]["resources"]["limits"] = {"example.com/fpga": "1"}
    result = failed(run(obj, [plain_node("n")]))
    assert result.statuses["n"].reasons == (
        "Insufficient ephemeral-storage",
        "Insufficient example.com/fpga",
    )
    assert result.unresolvable  # bigger than the node's whole allocatable


def test_an_extended_resource_few_nodes_list_finds_its_node_and_fails_as_kube_counts() -> None:
    """scheduler_perf's SchedulingWithExtendedResource: each node lists a resource of its own.
    The search goes to the nodes listing the pod's (an index) and finds the one; with no room
    left there, the failure still judges and counts every node, as kube-scheduler's."""
    nodes = [plain_node(f"n{i:02d}", extra={f"example.com/bar-{i}": 1}) for i in range(40)]
    asking = pod("p")
    asking["spec"]["containers"][0]["resources"]["limits"] = {"example.com/bar-17": "1"}
    snapshot = Snapshot(nodes)
    assert snapshot.capacity().listing(["cpu", "example.com/bar-17"]) == {"n17"}
    assert snapshot.capacity().listing(["cpu", "memory"]) is None  # every node: no narrowing
    fw = build_framework()
    placed = decided(schedule_one(asking, snapshot, fw))
    assert placed.node == "n17"
    snapshot.assume(request(asking), placed.node, placed.placement)
    again = pod("q")
    again["spec"]["containers"][0]["resources"]["limits"] = {"example.com/bar-17": "1"}
    result = failed(schedule_one(again, snapshot, fw))
    assert len(result.statuses) == 40
    assert {s.reasons for s in result.statuses.values()} == {("Insufficient example.com/bar-17",)}


def test_init_containers_sidecars_and_overhead_follow_kube_rules() -> None:
    obj = pod("p", cpu="2")
    obj["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
        {"name": "setup", "resources": {"requests": {"cpu": "4", "memory": "8Gi"}}},
    ]
    obj["spec"]["overhead"] = {"cpu": "250m"}
    req = request(obj)
    # max(app 2 + sidecar 1, init 4 + sidecar 1) + overhead 0.25
    assert req.requests["cpu"] == 5250
    assert req.requests["memory"] == 8 * 2**30


def test_pod_level_requests_are_what_fits_and_what_a_running_pod_holds() -> None:
    """PodLevelResources: a pod asking 6 CPUs at pod level fits no 4-CPU node even though its
    containers ask 100m; a running pod's pod-level 3 CPUs leave 1 on its node."""
    big = pod("big", cpu="100m")
    big["spec"]["resources"] = {"requests": {"cpu": "6"}}
    result = failed(run(big, [plain_node("n", cpu=4)]))
    assert result.statuses["n"].reasons == ("Insufficient cpu",)
    holder = pod("holder", cpu="100m")
    holder["spec"]["resources"] = {"requests": {"cpu": "3"}}
    busy = plain_node("busy", cpu=4, pods=[running(holder)])
    assert failed(run(pod("two", cpu="2"), [busy])).statuses["busy"].reasons == (
        "Insufficient cpu",
    )
    assert decided(run(pod("one", cpu="1"), [busy])).node == "busy"


def test_own_anti_affinity_reason_when_existing_pods_carry_none() -> None:
    """Existing pods without any anti-affinity: the incoming pod's own term rejects."""
    nodes = [
        plain_node("n1", pods=[running(pod("db-0", labels={"app": "db"}))]),
        plain_node("n2"),
    ]
    obj = pod(
        "db-1",
        spec={
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {
                                "matchExpressions": [
                                    {"key": "app", "operator": "NotIn", "values": ["web"]}
                                ]
                            },
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        },
    )
    result = decided(run(obj, nodes))
    assert result.node == "n2"
    assert result.verdicts["n1"].status.reasons == ("node(s) didn't match pod anti-affinity rules",)


def test_existing_pods_preferred_affinity_attracts_the_incoming_pod() -> None:
    """Symmetry in scoring: an existing pod that prefers pods like the incoming one pulls it."""
    fan = pod(
        "fan",
        spec={
            "affinity": {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 80,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": "cache"}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            }
        },
    )
    nodes = [plain_node("a"), plain_node("b", pods=[running(fan)]), plain_node("c")]
    result = decided(run(pod("cache-0", labels={"app": "cache"}), nodes))
    assert result.node == "b"
    assert result.breakdown["InterPodAffinity"] > result.verdicts["a"].scores.get(
        "InterPodAffinity", 0
    )


def test_finished_pods_hold_nothing() -> None:
    done = pod("done", cpu="60", gpus=8)
    done["status"] = {"phase": "Succeeded"}
    assert bound_info(done) is None


@pytest.mark.parametrize(
    ("existing", "wanted", "conflict"),
    [
        (host_port(8080), host_port(8080), True),
        (host_port(8080), host_port(8080, protocol="UDP"), False),
        (host_port(8080), host_port(9090), False),
        (host_port(8080, ip="10.0.0.1"), host_port(8080, ip="10.0.0.2"), False),
        (host_port(8080, ip="10.0.0.1"), host_port(8080), True),  # wildcard
    ],
)
def test_host_ports(existing: dict, wanted: dict, conflict: bool) -> None:
    node = plain_node("n", pods=[running(pod("a", ports=[existing]))])
    result = run(pod("b", ports=[wanted]), [node])
    if conflict:
        assert failed(result).message == (
            "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
        )
    else:
        assert decided(result).node == "n"
