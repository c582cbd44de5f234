"""Reading pods and quantities: what a pod asks for, and clear errors for bad input.

Every malformed pod must come back as a parse error naming the field (which the scheduler
reports as an UnschedulableAndUnresolvable status on that pod) — never an exception — and must
not disturb the scheduling of other pods.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.podkeys import GANG, NUMA_POLICY, lookup
from common.quantity import QuantityError, parse_quantity, to_int, to_milli
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Code
from devcluster.pods import pod, yaml_pod
from tests.support.sched_hw import dgx_h100, gpu_node, run


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("64Gi", 64 * 2**30),
        ("1e3", 1000),
        ("1E3", 1000),
        ("2", 2),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.5Gi", 3 * 2**29),
        ("10G", 10**10),
        ("1k", 1000),
        ("500u", Fraction(1, 2000)),
        ("1E", 10**18),  # exa, not an exponent
        (3, 3),
        (0.25, Fraction(1, 4)),
    ],
)
def test_quantities_parse_exactly(text: object, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


def test_quantity_rounding_is_up() -> None:
    assert to_milli(parse_quantity("0.0001")) == 1
    assert to_milli(parse_quantity("1500m")) == 1500
    assert to_int(parse_quantity("1.2")) == 2
    assert to_int(parse_quantity("1Ki")) == 1024


@pytest.mark.parametrize(
    "text", ["", "abc", "1.2.3", "10 Gi", "1Gib", "-1", "1e999", True, None, [], "1e400"]
)
def test_bad_quantities_raise_quantity_error(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@given(st.text(max_size=30))
@settings(max_examples=300, deadline=None)
def test_quantity_parser_never_raises_anything_else(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert value >= 0


def test_alias_lookup_and_conflicts() -> None:
    assert lookup(NUMA_POLICY, {"numa.scheduling.kubenexus.io/policy": "isolated"}) == (
        "isolated",
        None,
    )
    value, conflict = lookup(
        NUMA_POLICY,
        {"topos.io/numa-policy": "single-numa", "numa.scheduling.kubenexus.io/policy": "isolated"},
    )
    assert value is None
    assert conflict is not None
    assert "topos.io/numa-policy" in conflict.message
    assert "numa.scheduling.kubenexus.io/policy" in conflict.message
    assert lookup(GANG, {"topos.io/gang": "a", "pod-group.scheduling.kubenexus.io/name": "a"}) == (
        "a",
        None,
    )


def test_a_full_pod_reads_into_a_request() -> None:
    obj = yaml_pod(
        """
metadata:
  name: trainer
  namespace: ml
  labels: {topos.io/gang: train-1, topos.io/gang-min: "8"}
  annotations:
    topos.io/gpu-locality: nvlink
    topos.io/numa-policy: restricted
    topos.io/numa-resources: cpu,nvidia.com/gpu
    topos.io/gang-timeout: 5m
    topology.scheduler/placement-strategy: consolidated
    topology.scheduler/preferred-domain: leaf-3
    topos.io/gpu-memory-min: 80Gi
spec:
  priority: 100
  priorityClassName: training
  containers:
  - name: a
    image: x
    resources:
      requests: {cpu: 1500m, memory: 8Gi}
      limits: {nvidia.com/gpu: 4}
  - name: b
    image: x
    resources: {requests: {cpu: 500m}}
"""
    )
    req = parse_pod(obj)
    assert isinstance(req, PodRequest)
    assert req.key == "ml/trainer"
    assert req.requests == {"cpu": 2000, "memory": 8 * 2**30, "nvidia.com/gpu": 4}
    assert req.gpus == 4
    assert req.gpu_locality == "nvlink"
    assert req.numa_policy == "restricted"
    assert req.numa_resources == frozenset({"cpu", "nvidia.com/gpu"})
    assert req.gpu_memory_min_mib == 80 * 1024
    assert req.priority == 100
    assert req.gang is not None
    assert (req.gang.name, req.gang.min_member, req.gang.timeout_s) == ("train-1", 8, 300.0)
    assert req.placement == "consolidated"


def test_gang_vocabularies() -> None:
    kubenexus = parse_pod(
        pod(
            "w",
            labels={
                "pod-group.scheduling.kubenexus.io/name": "spark-job-123",
                "pod-group.scheduling.kubenexus.io/min-available": "11",
            },
        )
    )
    assert isinstance(kubenexus, PodRequest)
    assert kubenexus.gang is not None
    assert (kubenexus.gang.name, kubenexus.gang.min_member, kubenexus.gang.source) == (
        "spark-job-123",
        11,
        "kubenexus",
    )
    x_k8s = parse_pod(pod("w", labels={"scheduling.x-k8s.io/pod-group": "pg-1"}))
    assert isinstance(x_k8s, PodRequest)
    assert x_k8s.gang is not None
    assert (x_k8s.gang.name, x_k8s.gang.min_member, x_k8s.gang.source) == ("pg-1", None, "x-k8s")


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown numa policy",
        {"annotations": {"topos.io/numa-policy": "fastest"}},
        "metadata.annotations[topos.io/numa-policy]",
    ),
    (
        "unknown kubenexus policy alias",
        {"annotations": {"numa.scheduling.kubenexus.io/policy": "strict"}},
        "metadata.annotations[numa.scheduling.kubenexus.io/policy]",
    ),
    (
        "contradictory policy spellings",
        {
            "annotations": {
                "topos.io/numa-policy": "single-numa",
                "numa.scheduling.kubenexus.io/policy": "isolated",
            }
        },
        "metadata.annotations[topos.io/numa-policy]",
    ),
    (
        "unknown numa resource",
        {"annotations": {"topos.io/numa-resources": "cpu,disk"}},
        "metadata.annotations[topos.io/numa-resources]",
    ),
    (
        "unknown locality",
        {"annotations": {"topos.io/gpu-locality": "same-rack"}},
        "metadata.annotations[topos.io/gpu-locality]",
    ),
    (
        "unknown placement",
        {"annotations": {"topos.io/placement": "random"}},
        "metadata.annotations[topos.io/placement]",
    ),
    (
        "unknown seed-003 strategy alias",
        {"annotations": {"topology.scheduler/placement-strategy": "random"}},
        "metadata.annotations[topology.scheduler/placement-strategy]",
    ),
    (
        "bad kubenexus resources alias",
        {"annotations": {"numa.scheduling.kubenexus.io/resources": "cpu,disk"}},
        "metadata.annotations[numa.scheduling.kubenexus.io/resources]",
    ),
    (
        "bad kubenexus gang count alias",
        {
            "labels": {
                "pod-group.scheduling.kubenexus.io/name": "g",
                "pod-group.scheduling.kubenexus.io/min-available": "many",
            }
        },
        "metadata.labels[pod-group.scheduling.kubenexus.io/min-available]",
    ),
    (
        "malformed cpu",
        {"cpu": "lots"},
        "spec.containers[0].resources.requests.cpu",
    ),
    (
        "negative memory",
        {"memory": "-1Gi"},
        "spec.containers[0].resources.requests.memory",
    ),
    (
        "negative gpus",
        {"gpus": "-2"},
        "spec.containers[0].resources.limits.nvidia.com/gpu",
    ),
    (
        "fractional gpus",
        {"gpus": "0.5"},
        "spec.containers[0].resources.limits.nvidia.com/gpu",
    ),
    (
        "absurd gpus",
        {"gpus": "1e6"},
        "spec.containers[*].resources.limits[nvidia.com/gpu]",
    ),
    (
        "unknown mig profile resource",
        {"limits": {"nvidia.com/mig-9g.99gb": "1"}},
        "spec.containers[*].resources.limits[nvidia.com/mig-9g.99gb]",
    ),
    (
        "unknown mig profile annotation",
        {"annotations": {"topos.io/mig-profile": "1g.11gb"}},
        "metadata.annotations[topos.io/mig-profile]",
    ),
    (
        "mig annotation contradicts resource",
        {
            "annotations": {"topos.io/mig-profile": "3g.40gb"},
            "limits": {"nvidia.com/mig-1g.10gb": "1"},
        },
        "metadata.annotations[topos.io/mig-profile]",
    ),
    (
        "bad memory minimum",
        {"annotations": {"topos.io/gpu-memory-min": "lots"}},
        "metadata.annotations[topos.io/gpu-memory-min]",
    ),
    (
        "gang min not a number",
        {"labels": {"topos.io/gang": "g", "topos.io/gang-min": "eight"}},
        "metadata.labels[topos.io/gang-min]",
    ),
    (
        "gang without min",
        {"labels": {"topos.io/gang": "g"}},
        "metadata.labels[topos.io/gang-min]",
    ),
    (
        "bad gang timeout",
        {
            "labels": {"topos.io/gang": "g", "topos.io/gang-min": "2"},
            "annotations": {"topos.io/gang-timeout": "soon"},
        },
        "metadata.annotations[topos.io/gang-timeout]",
    ),
    (
        "bad toleration operator",
        {"spec": {"tolerations": [{"key": "a", "operator": "Matches"}]}},
        "spec.tolerations[0].operator",
    ),
    (
        "bad affinity operator",
        {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "a", "operator": "Near"}]}
                            ]
                        }
                    }
                }
            }
        },
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator",
    ),
    (
        "spread without maxSkew",
        {
            "spec": {
                "topologySpreadConstraints": [
                    {"topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}
                ]
            }
        },
        "spec.topologySpreadConstraints[0].maxSkew",
    ),
    ("containers not a list", {"spec": {"containers": "main"}}, "spec.containers"),
]


def _bad_pod(change: dict[str, Any]) -> dict[str, Any]:
    obj = pod(
        "bad",
        cpu=change.get("cpu", "1"),
        memory=change.get("memory", "1Gi"),
        labels=change.get("labels"),
        annotations=change.get("annotations"),
    )
    container = obj["spec"]["containers"][0]
    if "gpus" in change:
        container["resources"]["limits"] = {"nvidia.com/gpu": change["gpus"]}
    if "limits" in change:
        container["resources"]["limits"] = change["limits"]
    obj["spec"].update(change.get("spec", {}))
    return obj


@pytest.mark.parametrize(("case", "change", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_pods_name_the_field_and_stay_pending(case: str, change: dict, field: str) -> None:
    obj = _bad_pod(change)
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodSpecError), case
    assert parsed.field == field
    assert parsed.pod_key == "default/bad"
    result = run(obj, [gpu_node("h", dgx_h100("h"))])
    assert isinstance(result, Failure)
    assert result.unresolvable
    assert result.pod_status is not None
    assert result.pod_status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.message.startswith("0/1 nodes are available: pod spec is invalid: invalid ")
    assert field in result.message


def test_a_bad_key_the_pod_inherited_says_to_mend_it_on_the_workload() -> None:
    """The LeaderWorkerSet's `topos.io/gpu-locality: strict` reached its pods (listed in
    `topos.io/inherited`): the pod's message says the key came from its workload, whose
    template the user will otherwise search in vain; a key the pod writes itself does not."""
    inherited = {"topos.io/gpu-locality": "strict", "topos.io/inherited": "topos.io/gpu-locality"}
    said = parse_pod(pod("w", gpus=1, annotations=inherited))
    assert isinstance(said, PodSpecError)
    assert said.text.startswith(
        "invalid metadata.annotations[topos.io/gpu-locality]: unknown value 'strict'"
    )
    assert said.text.endswith(
        "; the pod inherited topos.io/gpu-locality from the workload that made it (its Job, "
        "JobSet, LeaderWorkerSet, Deployment…): change it there"
    )
    own = parse_pod(pod("w", gpus=1, annotations={"topos.io/gpu-locality": "strict"}))
    assert isinstance(own, PodSpecError)
    assert "inherited" not in own.text


def test_a_bad_pod_does_not_disturb_the_next_one() -> None:
    snapshot = Snapshot([gpu_node("h", dgx_h100("h"))])
    fw = build_framework()
    bad = schedule_one(_bad_pod({"gpus": "-1"}), snapshot, fw)
    good = schedule_one(pod("good", gpus=8), snapshot, fw)
    assert isinstance(bad, Failure)
    assert isinstance(good, Decision)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "metadata",
                        "spec",
                        "containers",
                        "resources",
                        "limits",
                        "requests",
                        "name",
                        "annotations",
                        "labels",
                        "affinity",
                        "tolerations",
                        "nvidia.com/gpu",
                        "cpu",
                    ]
                ),
                children,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
@settings(max_examples=300, deadline=None)
def test_garbage_pods_never_raise(garbage: object) -> None:
    result = parse_pod(garbage)
    assert isinstance(result, PodRequest | PodSpecError)


def test_scheduling_gates_are_read_and_a_malformed_gate_is_named() -> None:
    from coordinator.core.framework.cycle import schedule_one
    from coordinator.core.framework.results import Failure
    from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
    from coordinator.core.registry import build_framework
    from coordinator.core.snapshot.snapshot import Snapshot
    from devcluster.pods import pod

    gated = pod("g", gpus=1)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    request = parse_pod(gated)
    assert isinstance(request, PodRequest)
    assert request.scheduling_gates == ("example.com/quota",)
    result = schedule_one(request, Snapshot([]), build_framework())
    assert isinstance(result, Failure)
    assert result.unresolvable
    assert result.message == "waiting for scheduling gates: example.com/quota"

    gated["spec"]["schedulingGates"] = ["example.com/quota"]
    bad = parse_pod(gated)
    assert isinstance(bad, PodSpecError)
    assert bad.field == "spec.schedulingGates[0]"
