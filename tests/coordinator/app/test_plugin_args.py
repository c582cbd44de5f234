"""Each plugin's own arguments (kube-scheduler's ``pluginConfig``): a profile's entry reaches
that plugin and changes where its pods go; the section's keys (``packing``) are the default
every profile starts from; an entry for a plugin without arguments, an unknown key or a bad
value is refused naming the profile, the plugin and the key."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from coordinator.app.config.scheduling import ConfigError, load_config
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision
from coordinator.core.registry import build_profiles
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, request, running


def _half_and_empty() -> Snapshot:
    busy = running(pod("x", gpus=4), gpus=(0, 1, 2, 3))
    return Snapshot(
        [gpu_node("half", dgx_h100("half"), pods=[busy]), gpu_node("empty", dgx_h100("empty"))]
    )


def _two_profiles() -> Mapping[str, object]:
    spread = {"name": "GpuPacking", "args": {"packing": "spread"}}
    return {
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {"schedulerName": "packed"},
            {"schedulerName": "spready", "pluginConfig": [spread]},
        ],
    }


def _node_for(config_doc: Mapping[str, object], profile: str) -> str:
    profiles = build_profiles(load_config(config_doc))
    framework = profiles.get(profile)
    assert framework is not None
    result = schedule_one(request(pod("p", gpus=1)), _half_and_empty(), framework)
    assert isinstance(result, Decision), result
    return result.node


def test_a_profiles_plugin_config_reaches_only_that_profiles_plugin() -> None:
    doc = _two_profiles()
    assert _node_for(doc, "packed") == "half"
    assert _node_for(doc, "spready") == "empty"


def test_the_sections_packing_is_every_profiles_until_plugin_config_changes_it() -> None:
    doc = {
        "packing": "spread",
        "profiles": [
            {"schedulerName": "spready"},
            {
                "schedulerName": "packed",
                "pluginConfig": [{"name": "GpuPacking", "args": {"packing": "binpack"}}],
            },
        ],
    }
    assert _node_for(doc, "spready") == "empty"
    # GpuPacking packs again; DomainUtilisation keeps the section's spread (no leaves here).
    assert _node_for(doc, "packed") == "half"


def _refused(entry: Mapping[str, object]) -> str:
    doc = {"profiles": [{"schedulerName": "a"}, {"schedulerName": "b", "pluginConfig": [entry]}]}
    with pytest.raises(ConfigError) as caught:
        load_config(doc)
    return str(caught.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "GpuAvailability", "args": {"spread": True}},
            "profiles[1].pluginConfig[0].args.spread: GpuAvailability takes no args",
        ),
        (
            {"name": "GpuAvailability"},
            "profiles[1].pluginConfig[0]: GpuAvailability takes no args",
        ),
        (
            {"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}},
            "profiles[1].pluginConfig[0].args.permitWaitingTimeSeconds: Coscheduling takes no args",
        ),
        (
            {"name": "GpuPacking", "args": {"pakcing": "spread"}},
            "profiles[1].pluginConfig[0].args.pakcing: unknown key — did you mean 'packing'? "
            "(GpuPacking takes packing)",
        ),
        (
            {"name": "GpuPacking", "args": {"packing": "tight"}},
            "profiles[1].pluginConfig[0].args.packing: unknown mode 'tight' "
            "(expected binpack or spread)",
        ),
        (
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Balanced"}}},
            "profiles[1].pluginConfig[0].args.scoringStrategy.type: 'Balanced' is not "
            "LeastAllocated or MostAllocated",
        ),
        (
            {"name": "NUMATopology", "args": {"x": 1}},  # KubeNexus' name for NumaTopology
            "profiles[1].pluginConfig[0].args.x: NUMATopology takes no args",
        ),
        (
            {"name": "GpuPackin", "args": {}},
            "profiles[1].pluginConfig[0].name: unknown plugin 'GpuPackin' — did you mean "
            "'GpuPacking'?",
        ),
    ],
)
def test_plugin_config_that_no_plugin_takes_is_refused_by_its_path(
    entry: Mapping[str, object], message: str
) -> None:
    assert _refused(entry) == message


def test_a_plugin_configured_twice_in_one_profile_is_refused() -> None:
    doc = {
        "profiles": [
            {
                "pluginConfig": [
                    {"name": "GpuPacking", "args": {"packing": "spread"}},
                    {"name": "GpuPacking", "args": {"packing": "binpack"}},
                ]
            }
        ]
    }
    with pytest.raises(ConfigError, match=r"pluginConfig\[1\]\.name: GpuPacking is configured"):
        load_config(doc)


def test_fragmentation_keys_are_the_fragmentation_plugins_args() -> None:
    with pytest.raises(ConfigError, match=r"^fragmentation\.shapeHalfLife: must be a whole"):
        load_config({"fragmentation": {"shapeHalfLife": 0}})
    with pytest.raises(ConfigError, match=r"^packing: unknown mode 'tight'"):
        load_config({"packing": "tight"})
