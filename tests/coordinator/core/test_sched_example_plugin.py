"""Adding a scorer is its module plus one registry line (docs/architecture.md, "Adding a
scorer"): the example plugin, registered, moves a pod to the node it prefers; by name in
``weights`` it can be turned off like any built-in one."""

from __future__ import annotations

import pytest

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision
from coordinator.core.plugins import example
from coordinator.core.plugins.declaration import AnySpec
from coordinator.core.registry import PLUGINS, build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import plain_node, request


def _nodes() -> Snapshot:
    # "a" is emptier, so NodeResourcesFit (LeastAllocated) prefers it; "b" carries the label.
    busy = {"cpu": 30_000}
    return Snapshot(
        [
            plain_node("a", cpu=32),
            plain_node("b", cpu=32, labels={example.LABEL: "true"}, requested=busy),
        ]
    )


def _chosen(plugins: tuple[AnySpec, ...], weights: dict[str, int] | None = None) -> Decision:
    fw = build_framework(SchedulerConfig(weights=weights or {}), plugins=plugins)
    result = schedule_one(request(pod("p", cpu="1")), _nodes(), fw)
    assert isinstance(result, Decision), result
    return result


def test_a_registered_scorer_changes_where_a_pod_goes() -> None:
    assert _chosen(PLUGINS).node == "a"  # without it: the emptier node
    with_it = _chosen((*PLUGINS, example.PLUGIN))
    assert with_it.node == "b"
    assert with_it.breakdown["PreferLabelled"] == 10 * 100  # its declared weight × its score


def test_a_registered_scorer_is_weighted_by_its_name() -> None:
    off = _chosen((*PLUGINS, example.PLUGIN), weights={"PreferLabelled": 0})
    assert off.node == "a"
    assert "PreferLabelled" not in off.breakdown


def test_a_registered_scorer_reads_its_own_args() -> None:
    args = {"PreferLabelled": example.PreferLabelledArgs(label="elsewhere")}
    fw = build_framework(SchedulerConfig(args=args), plugins=(*PLUGINS, example.PLUGIN))
    result = schedule_one(request(pod("p", cpu="1")), _nodes(), fw)
    assert isinstance(result, Decision), result
    assert result.node == "a"  # "b" carries the default label, not the one its args name
    assert result.breakdown.get("PreferLabelled", 0) == 0


def test_args_for_a_plugin_the_profile_does_not_have_are_refused() -> None:
    with pytest.raises(KeyError, match="args: unknown plugin 'PreferLabelled'"):
        build_framework(SchedulerConfig(args={"PreferLabelled": example.PreferLabelledArgs()}))


def test_args_of_another_type_are_refused_naming_the_plugin() -> None:
    # mypy checks a declaration's factory against its args type; a profile's args are checked
    # when the plugin is built.
    wrong = {"PreferLabelled": {"label": "x"}}
    with pytest.raises(TypeError, match="PreferLabelled: args must be a PreferLabelledArgs"):
        build_framework(SchedulerConfig(args=wrong), plugins=(*PLUGINS, example.PLUGIN))
    with pytest.raises(TypeError, match="NodePorts: takes no args, not 3"):
        build_framework(SchedulerConfig(args={"NodePorts": 3}))
