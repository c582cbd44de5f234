"""The label-value grammar of common.labels: what the API server would accept, and sanitising
free text into it without ever producing a value Kubernetes rejects."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.labels import (
    LabelBuilder,
    NodeLabels,
    is_label_key,
    is_label_value,
    merge,
    sanitise_label_value,
)


@pytest.mark.parametrize(
    ("value", "legal"),
    [
        ("", True),
        ("a", True),
        ("NVIDIA-A100-SXM4-40GB", True),
        ("535.104.05", True),
        ("0-15,32-47", False),
        ("1g.5gb:7", False),
        ("-leading", False),
        ("trailing.", False),
        ("has space", False),
        ("x" * 63, True),
        ("x" * 64, False),
        ("ümlaut", False),
    ],
)
def test_label_value_grammar(value: str, legal: bool) -> None:
    assert is_label_value(value) is legal


@pytest.mark.parametrize(
    ("key", "legal"),
    [
        ("topos.io/gpu.product", True),
        ("numa.kubenexus.io/node-0-cpus", True),
        ("plain", True),
        ("Upper.io/x", False),
        ("topos.io/", False),
        ("topos.io/" + "n" * 64, False),
    ],
)
def test_label_key_grammar(key: str, legal: bool) -> None:
    assert is_label_key(key) is legal


def test_sanitise_follows_gfd_spelling_and_trims() -> None:
    assert sanitise_label_value("NVIDIA A100-SXM4-40GB") == "NVIDIA-A100-SXM4-40GB"
    assert sanitise_label_value("  (Tesla) V100 / 16GB ") == "Tesla-V100-16GB"
    assert sanitise_label_value("***") == ""


@given(st.text(max_size=300))
def test_sanitised_text_is_always_a_legal_label_value(text: str) -> None:
    assert is_label_value(sanitise_label_value(text))


@given(st.text(max_size=300))
def test_builder_never_emits_an_illegal_label(text: str) -> None:
    b = LabelBuilder()
    b.text("topos.io/free", text)
    b.exact("topos.io/exact", text)
    out = b.build()  # NodeLabels validates every label; it would raise here
    assert all(is_label_value(v) for v in out.labels.values())
    # an exact value is never mangled: it is either the label or the annotation, verbatim
    assert out.labels.get("topos.io/exact", out.annotations.get("topos.io/exact")) == text


def test_text_keeps_exact_name_in_annotation_only_when_sanitising_lost_information() -> None:
    b = LabelBuilder()
    b.text("topos.io/a", "NVIDIA A100-SXM4-40GB")  # spaces only: nothing lost
    b.text("topos.io/b", "GPU (rev 2)")  # parentheses lost
    out = b.build()
    assert out.labels == {"topos.io/a": "NVIDIA-A100-SXM4-40GB", "topos.io/b": "GPU-rev-2"}
    assert out.annotations == {"topos.io/b": "GPU (rev 2)"}


def test_none_and_empty_become_unknown() -> None:
    b = LabelBuilder()
    b.text("topos.io/a", None)
    b.text("topos.io/b", "!!!")
    b.exact("topos.io/c", None)
    b.number("topos.io/d", None)
    b.flag("topos.io/e", None)
    assert set(b.build().labels.values()) == {"unknown"}


def test_node_labels_rejects_illegal_values_and_keys() -> None:
    with pytest.raises(ValueError, match="illegal value"):
        NodeLabels(labels={"topos.io/x": "0-15,32-47"})
    with pytest.raises(ValueError, match="illegal label key"):
        NodeLabels(labels={"Bad Key": "x"})


def test_merge_later_wins() -> None:
    a = NodeLabels(labels={"k/a": "1", "k/b": "1"}, annotations={"k/n": "first"})
    b = NodeLabels(labels={"k/b": "2"}, annotations={"k/n": "second"})
    merged = merge([a, b])
    assert merged.labels == {"k/a": "1", "k/b": "2"}
    assert merged.annotations == {"k/n": "second"}
    assert a.merge(b) == merged
