"""``customScorers``: a user's Score plugin loaded by module path (the example in
examples/scorers) or by a ``topos.scorers`` entry point changes where a pod goes, its args given
in a profile's ``pluginConfig`` as for built-in plugins (the entry's own ``args``: deprecated,
logged); a plugin that cannot be loaded or built with its args is a config error naming the
key; one that raises while scoring is skipped for that cycle (logged) and the pod is still
placed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import ConfigError
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "scorers"
WATTS = "example.com/watts-per-gpu"


def nodes() -> list[NodeInfo]:
    # Identical but for their power draw; with nothing else to tell them apart "a-hot" wins
    # (the lowest name).
    return [
        gpu_node("a-hot", dgx_h100("a-hot"), labels={WATTS: "700"}),
        gpu_node("b-cool", dgx_h100("b-cool"), labels={WATTS: "300"}),
    ]


def place(
    scorers: list[dict[str, Any]], plugin_config: list[dict[str, Any]] | None = None
) -> Decision:
    data: dict[str, Any] = {"percentageOfNodesToScore": 100, "customScorers": scorers}
    if plugin_config is not None:
        data["profiles"] = [{"pluginConfig": plugin_config}]
    config = load_config(data)
    result = schedule_one(pod("p", gpus=1), Snapshot(nodes()), build_framework(config))
    assert isinstance(result, Decision), result
    return result


POWER: dict[str, Any] = {"name": "PowerDraw", "module": "power_draw:PowerDraw", "weight": 10}
POWER_ARGS: dict[str, Any] = {"name": "PowerDraw", "args": {"label": WATTS, "maxWatts": 1000}}


def test_the_example_loaded_by_module_path_changes_the_placement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    assert place([]).node == "a-hot"
    chosen = place([POWER], [POWER_ARGS])
    assert chosen.node == "b-cool"
    assert chosen.breakdown["PowerDraw"] == pytest.approx(10 * 70.0)
    # Its args are the pluginConfig's: another label, which no node carries, scores nothing.
    other = place([POWER], [{"name": "PowerDraw", "args": {"label": "example.com/none"}}])
    assert other.node == "a-hot"


def test_the_entrys_own_args_still_work_and_are_logged_as_deprecated(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with caplog.at_level(logging.WARNING):
        chosen = place([{**POWER, "args": POWER_ARGS["args"]}])
    assert chosen.node == "b-cool"
    assert chosen.breakdown["PowerDraw"] == pytest.approx(10 * 70.0)
    assert (
        "customScorers[0].args is deprecated: give PowerDraw's args in a profile's pluginConfig"
        in (caplog.text)
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        place([POWER], [POWER_ARGS])
    assert "deprecated" not in caplog.text


@pytest.mark.parametrize(
    ("plugin_config", "message"),
    [
        (
            [{"name": "PowrDraw", "args": {}}],
            "profiles[0].pluginConfig[0].name: unknown plugin 'PowrDraw' — did you mean "
            "'PowerDraw'?",
        ),
        (
            [{"name": "PowerDraw", "args": [1000]}],
            "profiles[0].pluginConfig[0].args: must be a mapping",
        ),
        (
            [{"name": "PowerDraw", "args": {"maxWats": 1000}}],
            "profiles[0].pluginConfig[0].args: module power_draw:PowerDraw could not be built: "
            "TypeError: PowerDraw.__init__() got an unexpected keyword argument 'maxWats'",
        ),
        (
            [{"name": "PowerDraw", "args": {"maxWatts": "lots"}}],
            "profiles[0].pluginConfig[0].args: module power_draw:PowerDraw could not be built: "
            "ValueError: could not convert string to float: 'lots'",
        ),
        (
            [POWER_ARGS, POWER_ARGS],
            "profiles[0].pluginConfig[1].name: PowerDraw is configured twice "
            "(also by profiles[0].pluginConfig[0].args)",
        ),
    ],
)
def test_a_custom_scorers_plugin_config_that_cannot_be_used_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, plugin_config: list[dict[str, Any]], message: str
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with pytest.raises(ConfigError) as caught:
        place([POWER], plugin_config)
    assert str(caught.value) == message


def test_a_scorer_registered_as_an_entry_point_is_found_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dist = tmp_path / "power_scorers-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: power-scorers\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[topos.scorers]\npower = power_draw:PowerDraw\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    entry = {"name": "Power", "entryPoint": "power", "weight": 10, "args": {"label": WATTS}}
    assert place([entry]).node == "b-cool"
    with pytest.raises(ConfigError, match=r"no topos\.scorers entry point named 'powr'"):
        load_config({"customScorers": [{**entry, "entryPoint": "powr"}]})


def test_a_scorer_that_raises_is_skipped_for_the_cycle_and_the_pod_placed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky = {
        "name": "Flaky",
        "module": "tests.support.scorers:FailsSometimes",
        "weight": 50,
    }
    flaky_args = {"name": "Flaky", "args": {"good": ["b-cool"], "bad": "a-hot"}}
    with caplog.at_level(logging.WARNING):
        chosen = place([flaky], [flaky_args])
    assert chosen.node == "a-hot"  # as without it: its scores were not used
    assert "Flaky" not in chosen.breakdown
    assert "custom scorer Flaky skipped for pod default/p: RuntimeError: no data for a-hot" in (
        caplog.text
    )
    working = place([flaky], [{"name": "Flaky", "args": {"good": ["b-cool"]}}])
    assert working.node == "b-cool"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "X", "module": "no_such_pkg.scorers:X"},
            "customScorers[0].module: no_such_pkg.scorers:X cannot be loaded: ModuleNotFoundError",
        ),
        (
            {"name": "X", "module": "tests.support.scorers:Missing"},
            "cannot be loaded: AttributeError",
        ),
        ({"name": "X", "module": "tests.support.scorers"}, "must be 'package.module:attribute'"),
        (
            {"name": "X", "module": "tests.support.scorers:CannotStart"},
            "could not be built: ValueError: needs a license key",
        ),
        ({"name": "X", "module": "tests.support.scorers:NoScore"}, "no score(state, pod, node)"),
        ({"name": "X", "module": "tests.support.scorers:NOT_CALLABLE"}, "is not callable"),
        ({"name": "GpuPacking", "module": "tests.support.scorers:NoScore"}, "already a plugin"),
        (  # kube's name for NumaTopology: a pluginConfig entry could not tell them apart
            {"name": "NUMATopology", "module": "tests.support.scorers:NoScore"},
            "customScorers[0].name: 'NUMATopology' is already a plugin's name",
        ),
        ({"name": "X"}, "give exactly one of module and entryPoint"),
        ({"name": "X", "module": "a:b", "weight": 500}, "weight: must be an integer from 0"),
    ],
)
def test_a_scorer_that_cannot_be_used_is_a_config_error(
    entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"customScorers": [entry]})
    assert message in str(caught.value)
