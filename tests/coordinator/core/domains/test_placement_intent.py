"""Placement annotations: canonical names, the seed-003 aliases, and clear errors for bad values."""

from __future__ import annotations

import pytest

from coordinator.core.domains.strategy import (
    IntentError,
    PlacementIntent,
    Strategy,
    parse_bandwidth,
    placement_intent,
)


def test_defaults_to_balanced() -> None:
    assert placement_intent({}) == PlacementIntent()


def test_seed_003_annotations_are_accepted_as_written() -> None:
    intent = placement_intent(
        {
            "topology.scheduler/gpu-count": "16",
            "topology.scheduler/preferred-domain": "spine-1",
            "topology.scheduler/network-bandwidth": "200Gb",
            "topology.scheduler/placement-strategy": "consolidated",
        }
    )
    assert isinstance(intent, PlacementIntent)
    assert intent.strategy is Strategy.CONSOLIDATED
    assert intent.preferred_domain == "spine-1"
    assert intent.gpu_count == 16
    assert intent.network_bandwidth_gbps == 200.0
    assert intent.single_spine
    latency = placement_intent({"topology.scheduler/latency-sensitive": "true"})
    assert isinstance(latency, PlacementIntent)
    assert latency.latency_sensitive


@pytest.mark.parametrize(
    ("annotations", "fragment"),
    [
        ({"topos.io/placement": "packed"}, "expected one of consolidated"),
        (
            {"topology.scheduler/placement-strategy": "packed"},
            "annotation topology.scheduler/placement-strategy='packed'",
        ),
        (
            {
                "topos.io/placement": "balanced",
                "topology.scheduler/placement-strategy": "distributed",
            },
            "contradictory",
        ),
        (
            {"topology.scheduler/gpu-count": "-8"},
            "annotation topology.scheduler/gpu-count='-8': expected a whole number",
        ),
        ({"topology.scheduler/gpu-count": "eight"}, "whole number of GPUs"),
        ({"topology.scheduler/gpu-count": "0"}, "whole number of GPUs"),
        (
            {"topology.scheduler/network-bandwidth": "fast"},
            "annotation topology.scheduler/network-bandwidth='fast'",
        ),
        (
            {"topology.scheduler/latency-sensitive": "yes please"},
            "topology.scheduler/latency-sensitive='yes please'",
        ),
        ({"topos.io/preferred-domain": "leaf 1!"}, "not a leaf, spine or zone name"),
    ],
)
def test_bad_values_are_refused_with_the_key_in_the_message(
    annotations: dict[str, str], fragment: str
) -> None:
    result = placement_intent(annotations)
    assert isinstance(result, IntentError)
    assert fragment in result.message


def test_bandwidth_units() -> None:
    assert parse_bandwidth("100Gb") == 100.0
    assert parse_bandwidth("400 Gbps") == 400.0
    assert parse_bandwidth("1.6T") == 1600.0
    assert parse_bandwidth("500Mbit/s") == 0.5
    assert parse_bandwidth("lots") is None
