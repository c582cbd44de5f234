"""``scheduling.weights`` by plugin name, with the keys written before weights were by name
still read (each sets the plugins it always set), and a bad value named by the key as written."""

from __future__ import annotations

import pytest

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import ConfigError
from coordinator.core.registry import build_framework


def _weights(doc: str) -> dict[str, float]:
    return {p.name: w for p, w in build_framework(load_config(doc)).score}


def test_weights_are_by_plugin_name_and_the_old_keys_are_aliases() -> None:
    w = _weights("weights: {GpuTopology: 9, bin_packing: 7}")
    assert (w["GpuTopology"], w["GpuPacking"]) == (9, 7)
    assert w["DynamicResources"] == 5  # GpuTopology by name leaves DynamicResources as it was
    old = _weights("weights: {topology_fitness: 8, inter_pod_affinity: 0}")
    assert (old["GpuTopology"], old["DynamicResources"]) == (8, 8)  # as the key always did
    assert "InterPodAffinity" not in old  # weight 0: not scored
    assert "GroupSpread" not in old


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("weights: {numa_fit: -1}", "weights.numa_fit: must be an integer from 0 to 100"),
        ("weights: {NumaTopology: 101}", "weights.NumaTopology: must be an integer from 0 to 100"),
        ("weights: {NumaTopolgy: 1}", "weights.NumaTopolgy: unknown weight — did you mean"),
    ],
)
def test_a_bad_weight_is_named_as_written(doc: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(doc)
