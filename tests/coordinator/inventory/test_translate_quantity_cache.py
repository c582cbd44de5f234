"""Quantities seen again are served from the translation's cache: the answers must be the ones a
fresh parse gives, per unit (``1`` CPU is 1000 millicores, ``1`` GPU is one device), and bad text
must be refused every time, never remembered as a number."""

from __future__ import annotations

import pytest

from common.quantity import QuantityError
from coordinator.inventory import translate
from coordinator.inventory.translate import pod_requests, quantity
from tests.support.pods import pod


def test_same_text_means_different_units_per_resource() -> None:
    for _ in range(3):  # the first call parses, the later ones hit the cache
        assert quantity("cpu", "1") == 1000
        assert quantity("nvidia.com/gpu", "1") == 1
        assert quantity("cpu", "250m") == 250
        assert quantity("memory", "4Gi") == 4 * 2**30


def test_repeated_pods_count_the_same_as_the_first() -> None:
    first = pod_requests(pod("p", cpu="1500m", memory="64Gi", gpus=2))
    assert first == {"cpu": 1500, "memory": 64 * 2**30, "nvidia.com/gpu": 2}
    assert pod_requests(pod("p", cpu="1500m", memory="64Gi", gpus=2)) == first


def test_bad_text_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(QuantityError):
            quantity("memory", "lots")
        with pytest.raises(QuantityError):
            quantity("cpu", "-1")
    # and a pod carrying it still translates, without that resource
    assert pod_requests(pod("p", cpu="lots", memory="1Gi", gpus=1)) == {
        "memory": 2**30,
        "nvidia.com/gpu": 1,
    }


def test_numbers_and_unhashable_garbage_are_not_cached_but_still_answered() -> None:
    assert quantity("cpu", 2) == 2000
    assert quantity("memory", 0.5) == 1  # bytes round up
    with pytest.raises(QuantityError):
        quantity("cpu", {"not": "a quantity"})


def test_the_cache_stays_bounded() -> None:
    for i in range(translate._PARSED_MAX + 10):
        assert quantity("memory", f"{i}Ki") == i * 1024
    assert len(translate._PARSED) <= translate._PARSED_MAX
