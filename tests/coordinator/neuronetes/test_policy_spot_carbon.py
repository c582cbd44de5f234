"""Spot and carbon policies: interruptions counted per window disable spot (with the guide's two
spellings), maxSpotPercent caps replicas on spot, replacements get on-demand affinity; the
intensity document is parsed strictly, a failed fetch keeps the last good values with their age
(file and HTTP, garbage and timeouts); clean-energy hours hold non-urgent pods outside the
window, over midnight and in a named zone; unknown regions are named."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web

from coordinator.core.framework.prices import capacity_type
from coordinator.core.podspec.affinity import node_affinity
from coordinator.core.podspec.selectors import match_node_terms
from coordinator.neuronetes.decide.policy import PolicyError
from coordinator.neuronetes.decide.policy.carbon import CleanHours, check_regions, parse_intensity
from coordinator.neuronetes.decide.policy.spot import (
    ON_DEMAND_AFFINITY,
    InterruptionTracker,
    SpotSettings,
    lost_spot_nodes,
    spot_replicas_allowed,
)
from coordinator.neuronetes.kube.carbon_source import IntensitySource
from tests.support.http_app import serving

GUIDE_SPOT_POOL = {
    "spotEnabled": True,
    "sloHeadroomMs": 2000,
    "spotStrategy": {
        "instanceTypes": ["p4d.24xlarge", "p3dn.24xlarge"],
        "onInterruption": "migrate-to-on-demand",
        "maxSpotPercent": 80,
    },
    "interruptionThreshold": {"count": 3, "window": "1h", "action": "disable-spot"},
}


def test_the_third_interruption_in_an_hour_disables_spot() -> None:
    settings = SpotSettings.from_pool(GUIDE_SPOT_POOL)
    assert (settings.enabled, settings.max_spot_percent, settings.limit) == (True, 80, 3)
    tracker = InterruptionTracker(settings)
    tracker.record("spot-1", at=0)
    tracker.record("spot-1", at=5)  # the same node reported twice counts once
    tracker.record("spot-2", at=1800)
    assert not tracker.verdict(1801).disabled
    tracker.record("spot-3", at=3700)  # spot-1's is out of the window by now
    assert tracker.verdict(3701).count == 2
    tracker.record("spot-4", at=3800)
    verdict = tracker.verdict(3801)
    assert verdict.disabled
    assert verdict.reason.startswith("disable-spot: 3 spot interruption(s) in the last 1h")


def test_spot_max_interruptions_allows_that_many_per_hour() -> None:
    tracker = InterruptionTracker(
        SpotSettings.from_pool({"spotEnabled": True, "spotMaxInterruptions": 2})
    )
    tracker.record("a", at=0)
    tracker.record("b", at=1)
    assert not tracker.verdict(2).disabled
    tracker.record("c", at=3)
    assert tracker.verdict(4).disabled


def test_only_spot_nodes_with_pool_pods_that_vanished_are_interruptions() -> None:
    before = {
        "spot-a": {"karpenter.sh/capacity-type": "spot"},
        "spot-b": {"eks.amazonaws.com/capacityType": "SPOT"},
        "od": {"karpenter.sh/capacity-type": "on-demand"},
        "spot-idle": {"karpenter.sh/capacity-type": "spot"},
    }
    gone = lost_spot_nodes(before, now={"spot-b"}, pool_nodes={"spot-a", "spot-b", "od"})
    assert gone == ["spot-a"]


def test_max_spot_percent_caps_replicas_on_spot() -> None:
    settings = SpotSettings.from_pool(GUIDE_SPOT_POOL)
    assert settings.max_spot_percent == 80
    assert spot_replicas_allowed(5, 80) == 4
    assert spot_replicas_allowed(5, 0) == 0
    assert not SpotSettings.from_pool({}).enabled


def test_the_on_demand_affinity_refuses_spot_nodes_as_the_scheduler_reads_it() -> None:
    assert SpotSettings.from_pool(GUIDE_SPOT_POOL).migrate_on_interruption
    # the affinity, as the scheduler reads it, refuses spot and accepts on-demand/unlabelled
    parsed = node_affinity(ON_DEMAND_AFFINITY["nodeAffinity"], "spec.affinity.nodeAffinity")
    assert parsed is not None
    assert parsed.required is not None
    for labels, fits in (
        ({"karpenter.sh/capacity-type": "spot"}, False),
        ({"eks.amazonaws.com/capacityType": "SPOT"}, False),
        ({"karpenter.sh/capacity-type": "on-demand"}, True),
        ({}, True),
    ):
        assert match_node_terms(parsed.required, "n", labels) is fits, capacity_type(labels)


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        ({"spotStrategy": {"maxSpotPercent": 120}}, "maxSpotPercent: must be 0 to 100"),
        ({"spotStrategy": {"onInterruption": "panic"}}, "'panic' is not migrate-to-on-demand"),
        ({"interruptionThreshold": {"count": 0}}, "interruptionThreshold.count: must be a whole"),
        ({"interruptionThreshold": {"count": 3, "window": "soon"}}, "window:"),
        ({"interruptionThreshold": {"count": 3, "action": "ignore"}}, "is not disable-spot"),
        ({"spotMaxInterruptions": -1}, "spotMaxInterruptions: must be a whole number"),
    ],
)
def test_bad_spot_settings_name_the_field(cost: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        SpotSettings.from_pool(cost)
    assert message in str(caught.value)


# --- carbon ---------------------------------------------------------------------------------------


def test_the_intensity_document_is_read_strictly() -> None:
    assert parse_intensity('{"unit": "gCO2/kWh", "regions": {"us-west-2": 85.5}}') == {
        "us-west-2": 85.5
    }
    for text, message in (
        ("<html>", "not JSON"),
        ('{"us-west-2": 85}', 'expected {"regions"'),
        ('{"unit": "lb/MWh", "regions": {}}', "unit 'lb/MWh' is not gCO2/kWh"),
        ('{"regions": {"eu-north-1": -3}}', "regions.eu-north-1: must be a number"),
    ):
        with pytest.raises(PolicyError, match=message):
            parse_intensity(text)


async def test_a_failed_file_fetch_keeps_the_last_good_values_with_their_age(
    tmp_path: Path,
) -> None:
    now = [100.0]
    path = tmp_path / "intensity.json"
    path.write_text('{"regions": {"us-west-2": 80, "us-east-1": 420}}')
    source = IntensitySource(str(path), clock=lambda: now[0])
    good = await source.refresh()
    assert (good.values["us-east-1"], good.error) == (420.0, "")
    path.write_text("garbage")
    now[0] = 160.0
    bad = await source.refresh()
    assert bad.values == good.values
    assert bad.age(now[0]) == 60.0
    assert "not JSON" in bad.error
    assert bad.describe(now[0]).startswith("2 region(s), 60s old; last fetch failed:")
    path.unlink()
    assert "No such file" in (await source.refresh()).error


@pytest.fixture
async def intensity_server() -> AsyncIterator[tuple[str, dict[str, object]]]:
    behaviour: dict[str, object] = {"body": '{"regions": {"eu-north-1": 30}}', "delay": 0.0}

    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(float(behaviour["delay"]))  # type: ignore[arg-type]
        return web.Response(text=str(behaviour["body"]), status=int(behaviour.get("status", 200)))  # type: ignore[call-overload]

    app = web.Application()
    app.router.add_get("/intensity", handler)
    async with serving(app) as url:
        yield f"{url}/intensity", behaviour


async def test_an_http_source_that_times_out_or_fails_keeps_the_last_values(
    intensity_server: tuple[str, dict[str, object]],
) -> None:
    url, behaviour = intensity_server
    source = IntensitySource(url, timeout_s=0.3)
    assert (await source.refresh()).values == {"eu-north-1": 30.0}
    behaviour["delay"] = 1.0
    slow = await source.refresh()
    assert slow.error == f"{url}: no answer within 0.3s"
    assert slow.values == {"eu-north-1": 30.0}
    behaviour.update(delay=0.0, status=503)
    assert (await source.refresh()).error == f"{url}: HTTP 503"
    behaviour.update(status=200, body='{"regions": {"eu-north-1": 25}}')
    recovered = await source.refresh()
    assert (recovered.values, recovered.error) == ({"eu-north-1": 25.0}, "")


def at(hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 6, 1, hh, mm, tzinfo=UTC)


def test_clean_hours_hold_non_urgent_pods_outside_the_window() -> None:
    hours = CleanHours.parse("09:00-17:00")
    assert not hours.gate(at(9)).hold
    assert not hours.gate(at(16, 59)).hold
    held = hours.gate(at(17))
    assert held.hold
    assert held.opens_at == datetime(2026, 6, 2, 9, 0, tzinfo=UTC)
    assert held.reason == (
        "held by neuronetes.io/clean-energy-window until the clean-energy window 09:00-17:00 "
        "opens at 2026-06-02T09:00:00+00:00"
    )
    assert hours.gate(at(7)).opens_at == datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
    assert not hours.gate(at(3), urgent=True).hold


def test_a_window_over_midnight_and_one_in_a_named_zone() -> None:
    night = CleanHours.parse("22:00-06:00")
    assert [night.contains(at(h)) for h in (21, 22, 2, 5, 6)] == [False, True, True, True, False]
    stockholm = CleanHours.parse("09:00-17:00 Europe/Stockholm")  # UTC+2 in June
    assert stockholm.contains(at(7))
    assert not stockholm.contains(at(15))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9-5", "is not HH:MM-HH:MM"),
        ("25:00-17:00", "out of range"),
        ("09:00-09:00", "empty window"),
        ("09:00-17:00 Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_malformed_hours_are_refused(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        CleanHours.parse(text)


def test_unknown_preferred_regions_are_named() -> None:
    known = {"us-west-2", "eu-north-1", "us-east-1"}
    assert check_regions(["us-west-2", "eu-north-1"], known) == []
    assert check_regions(["us-wset-2", "mars-1"], known) == [
        "preferredRegions: unknown region 'us-wset-2' — did you mean 'us-west-2'?",
        "preferredRegions: unknown region 'mars-1'",
    ]
