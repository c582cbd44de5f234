"""AgentPool pods (neuronetes.io/pool + annotations): the node holding the pod's model wins, the
cheaper node by the price table wins when caches are equal, spot is used only by pools that
enable it, preferred regions count in order, a region above the pool's carbon limit is refused by
name, ``cacheHitWeight`` sets the cache's share, and ordinary pods are scored as before."""

from __future__ import annotations

import json
from typing import Any

import pytest

from common import podkeys
from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import ConfigError, SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.plugins.pools import CarbonReadings
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.registry import build_framework, build_profiles
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node

PRICES = {
    "instanceTypes": {
        "p5.48xlarge": {"onDemand": 98.32, "spot": 30.0},
        "p5e.48xlarge": 120.0,
    },
    "gpuModels": {"H100": 5.0},
}
EVERY_NODE: dict[str, Any] = {"percentageOfNodesToScore": 100, "prices": PRICES}


def pool_pod(
    name: str, *, model: str = "", scheduling: dict[str, Any] | None = None
) -> dict[str, Any]:
    annotations = {"neuronetes.io/scheduling": json.dumps(scheduling or {})}
    if model:
        annotations["neuronetes.io/model"] = model
    obj = pod(name, gpus=1, labels={"neuronetes.io/pool": "chat"}, annotations=annotations)
    obj["spec"]["schedulerName"] = podkeys.AGENT_POOL_SCHEDULER_NAME  # as the controller writes
    return obj


def node(name: str, *, models: tuple[str, ...] = (), **labels: str) -> NodeInfo:
    keys = {
        "instance": "node.kubernetes.io/instance-type",
        "capacity": "karpenter.sh/capacity-type",
        "eks": "eks.amazonaws.com/capacityType",
        "region": "topology.kubernetes.io/region",
    }
    return gpu_node(
        name,
        dgx_h100(name),
        labels={keys[k]: v for k, v in labels.items()},
        cached_models=frozenset(models),
    )


def place(obj: dict[str, Any], nodes: list[NodeInfo], **config: Any) -> Decision | Failure:
    carbon = config.pop("_carbon", None)
    profiles = build_profiles(load_config({**EVERY_NODE, **config}), carbon=carbon)
    result = schedule_one(obj, Snapshot(nodes), profiles.for_pod(obj))
    assert isinstance(result, Decision | Failure)
    return result


def chosen(obj: dict[str, Any], nodes: list[NodeInfo], **config: Any) -> str:
    result = place(obj, nodes, **config)
    assert isinstance(result, Decision), result
    return result.node


def test_the_node_holding_the_model_wins_over_a_cheaper_one() -> None:
    nodes = [
        node("cheap", instance="p5.48xlarge"),
        node("cached", instance="p5e.48xlarge", models=("meta-llama/Llama-3.1-70B",)),
    ]
    assert chosen(pool_pod("p", model="meta-llama/Llama-3.1-70B"), nodes) == "cached"
    # the name alone matches the cached org/name
    assert chosen(pool_pod("p", model="llama-3.1-70b"), nodes) == "cached"


def test_with_equal_caches_the_cheaper_node_by_the_table_wins() -> None:
    nodes = [node("dear", instance="p5e.48xlarge"), node("cheap", instance="p5.48xlarge")]
    assert chosen(pool_pod("p", model="m"), nodes) == "cheap"
    # the per-GPU fallback: 8 × $5 = $40 an hour beats $98.32
    nodes.append(node("by-gpu"))
    assert chosen(pool_pod("p"), nodes) == "by-gpu"


def test_spot_is_cheaper_only_for_pools_that_enable_it() -> None:
    nodes = [
        node("spot", instance="p5.48xlarge", capacity="spot"),
        node("on-demand", instance="p5.48xlarge", eks="ON_DEMAND"),
    ]
    spot_ok = {"costOptimization": {"spotEnabled": True}}
    assert chosen(pool_pod("p", scheduling=spot_ok), nodes) == "spot"
    assert chosen(pool_pod("p"), nodes) == "on-demand"
    eks_spot = [node("eks-spot", instance="p5.48xlarge", eks="SPOT"), nodes[1]]
    assert chosen(pool_pod("p", scheduling=spot_ok), eks_spot) == "eks-spot"


def test_a_pool_with_spot_disabled_is_never_placed_on_spot() -> None:
    nodes = [node("spot", instance="p5.48xlarge", capacity="spot")]
    result = place(pool_pod("p", scheduling={"costOptimization": {"spotEnabled": False}}), nodes)
    assert isinstance(result, Failure)
    assert "spot nodes and the pool has spotEnabled: false" in result.message
    # a pool that says nothing about spot may still use it when nothing else fits
    assert chosen(pool_pod("q"), nodes) == "spot"


def test_preferred_regions_count_in_their_order() -> None:
    nodes = [
        node("east", instance="p5.48xlarge", region="us-east-1"),
        node("north", instance="p5e.48xlarge", region="eu-north-1"),
        node("west", instance="p5e.48xlarge", region="us-west-2"),
    ]
    green = {"carbonAware": {"enabled": True, "preferredRegions": ["us-west-2", "eu-north-1"]}}
    assert chosen(pool_pod("p", scheduling=green), nodes) == "west"
    assert chosen(pool_pod("p", scheduling=green), nodes[:2]) == "north"
    off = {"carbonAware": {"enabled": False, "preferredRegions": ["us-west-2"]}}
    assert chosen(pool_pod("p", scheduling=off), nodes) == "east"  # cheapest again


def test_a_region_above_the_carbon_limit_is_refused_by_name_and_intensity() -> None:
    nodes = [
        node("dirty", instance="p5.48xlarge", region="us-east-1"),
        node("clean", instance="p5e.48xlarge", region="eu-north-1"),
    ]
    readings = CarbonReadings({"us-east-1": 420.0, "eu-north-1": 30.0})
    limit = {"carbonAware": {"maxCarbonIntensity": 100}}
    assert chosen(pool_pod("p", scheduling=limit), nodes, _carbon=readings) == "clean"
    result = place(pool_pod("p", scheduling=limit), nodes[:1], _carbon=readings)
    assert isinstance(result, Failure)
    assert (
        "region us-east-1 at 420 gCO2/kWh, above the pool's maxCarbonIntensity 100"
        in result.message
    )
    readings.update({"eu-north-1": 30.0})  # no reading for us-east-1: not judged
    assert chosen(pool_pod("p", scheduling=limit), nodes[:1], _carbon=readings) == "dirty"


@pytest.mark.parametrize("share", [0.3, 0.5, 0.8])
def test_cache_hit_weight_is_that_share_of_the_cached_nodes_points(share: float) -> None:
    nodes = [
        node("cheap", instance="p5.48xlarge"),
        node("cached", instance="p5e.48xlarge", models=("org/m",)),
    ]
    scheduling = {"cacheAware": {"cacheHitWeight": share}}
    result = place(pool_pod("p", model="org/m", scheduling=scheduling), nodes)
    assert isinstance(result, Decision)
    assert result.node == "cached"
    # "cacheHitWeight: 0.3  # 30% of score": of the points the node got, the cache gave 30 %
    points = result.breakdown
    assert points["ModelCache"] / sum(points.values()) == pytest.approx(share)
    assert result.score == pytest.approx(sum(points.values()))
    cheap = result.verdicts["cheap"].scores
    assert cheap["ModelCache"] == 0  # no model there: no cache points
    none = place(
        pool_pod("p", model="org/m", scheduling={"cacheAware": {"cacheHitWeight": 0}}), nodes
    )
    assert isinstance(none, Decision)
    assert none.node == "cheap"
    assert "ModelCache" not in none.breakdown


def test_ordinary_pods_are_not_scored_by_pool_plugins() -> None:
    nodes = [
        node("dear", instance="p5e.48xlarge"),
        node("cheap", instance="p5.48xlarge", models=("m",)),
    ]
    result = place(pod("plain", gpus=1), nodes)
    assert isinstance(result, Decision)
    assert not {"ModelCache", "CostEfficiency", "PreferredRegion"} & set(result.breakdown)


def weights(fw: Framework) -> dict[str, float]:
    return {p.name: w for p, w in fw.score}


def test_the_guide_weights_are_the_pool_profiles_default_and_configurable() -> None:
    profiles = build_profiles(load_config(None))
    assert profiles.names == ("topos", "topos-agentpools")
    pools = weights(profiles.for_name("topos-agentpools"))
    assert (pools["GpuPacking"], pools["NumaTopology"], pools["ModelCache"]) == (6, 5, 4)
    assert (pools["CostEfficiency"], pools["InterPodAffinity"]) == (3, 2)
    assert weights(profiles.for_name("topos"))["GpuPacking"] == 3  # ordinary pods: unchanged
    config = load_config(
        {"agentPools": {"scoringWeights": {"costEfficiency": 1}, "weights": {"model_cache": 9}}}
    )
    pools = weights(build_profiles(config).for_name("topos-agentpools"))
    assert (pools["CostEfficiency"], pools["ModelCache"]) == (20, 9)


def test_the_generic_framework_has_one_weight_table() -> None:
    """The AgentPool weights are a profile's, not a second table of every framework."""
    fw = build_framework(SchedulerConfig())
    assert not hasattr(fw, "pool_score")
    assert weights(fw)["GpuPacking"] == 3


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"prices": {"instanceTypes": {"p5.48xlarge": -3}}},
            "prices.instanceTypes.p5.48xlarge: a price cannot be negative (-3)",
        ),
        (
            {"prices": {"gpuModels": {"A100": {"onDemand": 4, "spot": -1}}}},
            "prices.gpuModels.A100.spot: a price cannot be negative",
        ),
        ({"prices": {"gpuModels": {"A100": "cheap"}}}, "prices.gpuModels.A100: must be a number"),
        ({"prices": {"spotFactor": 2}}, "prices.spotFactor: must be a fraction from 0 to 1"),
        (
            {"prices": {"instanceType": {}}},
            "prices.instanceType: unknown key — did you mean 'instanceTypes'?",
        ),
        (
            {"agentPools": {"weights": {"model_cach": 1}}},
            "agentPools.weights.model_cach: unknown weight",
        ),
        (
            {"agentPools": {"scoringWeights": {"cost": 1}}},
            "agentPools.scoringWeights.cost: unknown factor",
        ),
    ],
)
def test_bad_prices_and_pool_weights_are_refused_by_entry(
    doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(doc)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("scheduling", "message"),
    [
        ("{not json", "metadata.annotations[neuronetes.io/scheduling]: not valid JSON"),
        ("[1]", "must be a JSON object"),
        (
            '{"cacheAware": {"cacheHitWeight": 1.5}}',
            "cacheAware.cacheHitWeight: must be from 0 to below 1",
        ),
        (
            '{"costOptimization": {"spotEnabled": "yes"}}',
            "costOptimization.spotEnabled: must be true or false",
        ),
        (
            '{"carbonAware": {"maxCarbonIntensity": -1}}',
            "carbonAware.maxCarbonIntensity: must be at least 0",
        ),
        ('{"carbonAware": {"preferredRegions": "us-west-2"}}', "preferredRegions: must be a list"),
    ],
)
def test_a_bad_scheduling_annotation_names_its_field(scheduling: str, message: str) -> None:
    obj = pool_pod("p")
    obj["metadata"]["annotations"]["neuronetes.io/scheduling"] = scheduling
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodSpecError)
    assert message in str(parsed.status.message)


def test_the_pool_keys_are_read_from_the_guides_examples() -> None:
    spec = {
        "priority": 100,
        "costOptimization": {"enabled": True, "sloHeadroomMs": 1000, "spotEnabled": True},
        "carbonAware": {
            "enabled": True,
            "preferredRegions": ["us-west-2"],
            "maxCarbonIntensity": 100,
        },
        "cacheAware": {"enabled": True, "cacheHitWeight": 0.3},
        "dataLocality": {"localityWeight": "high"},
    }
    parsed = parse_pod(pool_pod("p", model="smaller-model", scheduling=spec))
    assert isinstance(parsed, PodRequest)
    assert parsed.pool is not None
    assert (parsed.pool.pool, parsed.pool.model, parsed.pool.cache_hit_weight) == (
        "chat",
        "smaller-model",
        0.3,
    )
    assert (
        parsed.pool.spot_enabled,
        parsed.pool.preferred_regions,
        parsed.pool.max_carbon_intensity,
    ) == (
        True,
        ("us-west-2",),
        100.0,
    )
