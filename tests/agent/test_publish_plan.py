"""Diffing desired labels against a Node: add, change, remove only the agent's own stale keys,
leave foreign keys alone, and produce no patch at all for a steady node."""

from __future__ import annotations

import json

from agent.publish import NodeMetadata, OwnedKeys, plan_patch
from common import labels as L
from common.labels import NodeLabels

DESIRED = NodeLabels(
    labels={L.GPU_COUNT: "8", L.GPU_PRODUCT: "NVIDIA-A100-SXM4-40GB"},
    annotations={L.SUMMARY: "8x A100"},
)
FOREIGN_LABELS = {
    "kubernetes.io/hostname": "n1",
    L.LEAF: "leaf-1",  # under our prefix, but written by people: never ours
    "nvidia.com/gpu.deploy.driver": "true",
}


def _apply(meta: NodeMetadata, patch: dict[str, object] | None) -> NodeMetadata:
    """What the API server does with a JSON merge patch on metadata (RFC 7386)."""
    if patch is None:
        return meta
    md = patch["metadata"]
    assert isinstance(md, dict)
    out = []
    for current, part in (
        (meta.labels, md.get("labels", {})),
        (meta.annotations, md.get("annotations", {})),
    ):
        merged = dict(current)
        for k, v in part.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        out.append(merged)
    return NodeMetadata(labels=out[0], annotations=out[1])


def test_fresh_node_gets_everything_and_an_ownership_record() -> None:
    node = NodeMetadata(labels=FOREIGN_LABELS)
    plan = plan_patch(node, DESIRED)
    assert plan.patch is not None
    md = plan.patch["metadata"]
    assert md["labels"] == dict(DESIRED.labels)
    owned = json.loads(md["annotations"][L.OWNED_KEYS])
    assert owned == {"labels": sorted(DESIRED.labels), "annotations": [L.SUMMARY]}
    assert set(plan.added) == {f"label:{k}" for k in DESIRED.labels} | {
        f"annotation:{L.SUMMARY}",
        f"annotation:{L.OWNED_KEYS}",
    }


def test_steady_node_needs_no_patch() -> None:
    node = _apply(
        NodeMetadata(labels=FOREIGN_LABELS),
        plan_patch(NodeMetadata(labels=FOREIGN_LABELS), DESIRED).patch,
    )
    assert plan_patch(node, DESIRED).patch is None


def test_changed_value_patches_only_that_key() -> None:
    node = _apply(NodeMetadata(), plan_patch(NodeMetadata(), DESIRED).patch)
    changed = NodeLabels(
        labels={**DESIRED.labels, L.GPU_COUNT: "7"}, annotations=DESIRED.annotations
    )
    plan = plan_patch(node, changed)
    assert plan.patch == {"metadata": {"labels": {L.GPU_COUNT: "7"}}}
    assert plan.changed == (f"label:{L.GPU_COUNT}",)


def test_removes_only_own_stale_keys() -> None:
    before = NodeLabels(
        labels={**DESIRED.labels, L.MIG_ENABLED: "true", "nvidia.com/mig-1g.10gb.count": "7"},
        annotations={**DESIRED.annotations, L.MIG_LAYOUT: "1g.10gb:7"},
    )
    node = _apply(
        NodeMetadata(labels=FOREIGN_LABELS),
        plan_patch(NodeMetadata(labels=FOREIGN_LABELS), before).patch,
    )
    plan = plan_patch(node, DESIRED)
    assert plan.patch is not None
    md = plan.patch["metadata"]
    assert md["labels"] == {L.MIG_ENABLED: None, "nvidia.com/mig-1g.10gb.count": None}
    assert md["annotations"][L.MIG_LAYOUT] is None
    after = _apply(node, plan.patch)
    for key, value in FOREIGN_LABELS.items():
        assert after.labels[key] == value
    assert plan_patch(after, DESIRED).patch is None


def test_foreign_keys_under_our_prefixes_are_never_removed() -> None:
    # someone else wrote GFD's product label and a topos.io label the agent doesn't produce
    node = NodeMetadata(
        labels={"nvidia.com/gpu.product": "Tesla-T4", L.LEAF: "l1", "topos.io/custom": "x"},
    )
    plan = plan_patch(node, DESIRED)
    assert plan.patch is not None
    assert all(v is not None for v in plan.patch["metadata"]["labels"].values())
    assert plan.removed == ()


def test_an_owned_key_outside_our_prefixes_is_not_removed() -> None:
    # a forged ownership record can't make the agent delete someone else's key
    record = OwnedKeys(labels=frozenset({"kubernetes.io/hostname"})).encode()
    node = NodeMetadata(labels={"kubernetes.io/hostname": "n1"}, annotations={L.OWNED_KEYS: record})
    plan = plan_patch(node, DESIRED)
    assert plan.patch is not None
    assert "kubernetes.io/hostname" not in plan.patch["metadata"]["labels"]


def test_malformed_ownership_record_removes_nothing_and_is_rewritten() -> None:
    for garbage in ("not json", '{"labels": 3}', "[]", '{"labels":[1],"annotations":[]}'):
        node = NodeMetadata(
            labels={L.MIG_ENABLED: "true", **DESIRED.labels},
            annotations={L.OWNED_KEYS: garbage, **DESIRED.annotations},
        )
        plan = plan_patch(node, DESIRED)
        assert plan.removed == ()
        assert plan.patch is not None
        assert json.loads(plan.patch["metadata"]["annotations"][L.OWNED_KEYS])["labels"] == sorted(
            DESIRED.labels
        )


def test_a_key_moving_from_label_to_annotation() -> None:
    # a contiguous CPU list (label) becomes a split one (annotation) after a CPU hot-plug
    key = "numa.kubenexus.io/node-0-cpus"
    first = NodeLabels(labels={key: "0-63"})
    node = _apply(NodeMetadata(), plan_patch(NodeMetadata(), first).patch)
    second = NodeLabels(annotations={key: "0-15,32-47"})
    plan = plan_patch(node, second)
    assert plan.patch is not None
    assert plan.patch["metadata"]["labels"] == {key: None}
    assert plan.patch["metadata"]["annotations"][key] == "0-15,32-47"


def _with_clique(value: str) -> NodeLabels:
    return NodeLabels(labels={**DESIRED.labels, L.GFD_GPU_CLIQUE: value}, annotations={})


def test_a_clique_gfd_already_wrote_stays_gfds() -> None:
    node = NodeMetadata(labels={L.GFD_GPU_CLIQUE: "gfd-cluster.4"})
    plan = plan_patch(node, _with_clique("topos-cluster.7"))
    assert plan.patch is not None
    labels = plan.patch["metadata"]["labels"]
    assert L.GFD_GPU_CLIQUE not in labels  # neither overwritten nor removed
    owned = OwnedKeys.decode(plan.patch["metadata"]["annotations"][L.OWNED_KEYS])
    assert L.GFD_GPU_CLIQUE not in owned.labels  # and never taken over


def test_the_agent_writes_and_then_maintains_the_clique_where_nobody_did() -> None:
    node = _apply(NodeMetadata(), plan_patch(NodeMetadata(), _with_clique("c.7")).patch)
    assert node.labels[L.GFD_GPU_CLIQUE] == "c.7"
    moved = plan_patch(node, _with_clique("c.8"))  # its own key: it keeps it current
    assert moved.patch is not None
    assert moved.patch["metadata"]["labels"] == {L.GFD_GPU_CLIQUE: "c.8"}
