"""The ``neuronetes`` section of the coordinator's configuration."""

from __future__ import annotations

import pytest

from coordinator.app.config.load import ConfigError, parse_config


def test_defaults_and_values() -> None:
    assert parse_config({}).neuronetes.enabled is None  # on wherever the CRD is served
    section = parse_config(
        {"neuronetes": {"enabled": False, "resyncSeconds": 2, "defaultImage": "my/server:1"}}
    ).neuronetes
    assert (section.enabled, section.resync_s, section.default_image) == (False, 2, "my/server:1")


@pytest.mark.parametrize(
    ("doc", "named"),
    [({"resyncSeconds": 0}, "resyncSeconds"), ({"replicas": 3}, "replicas")],
)
def test_bad_values_are_named(doc: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config({"neuronetes": doc})


def test_carbon_intensity_source() -> None:
    assert parse_config({}).neuronetes.carbon_intensity is None  # no source: not read
    carbon = parse_config(
        {"neuronetes": {"carbonIntensity": {"source": "http://carbon/v1", "refreshSeconds": 60}}}
    ).neuronetes.carbon_intensity
    assert carbon is not None
    assert (carbon.source, carbon.refresh_s, carbon.timeout_s) == ("http://carbon/v1", 60, 5)


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({}, "source"),
        ({"source": ""}, "source"),
        ({"source": "/f", "refreshSeconds": 0}, "refreshSeconds"),
        ({"source": "/f", "timeoutSeconds": -1}, "timeoutSeconds"),
        ({"source": "/f", "url": "x"}, "url"),
    ],
)
def test_bad_carbon_intensity_values_are_named(doc: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config({"neuronetes": {"carbonIntensity": doc}})
