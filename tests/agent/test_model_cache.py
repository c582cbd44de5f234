"""The agent's model cache report: a Hugging Face hub cache laid out in a temp dir is scanned into
model ids and sizes, published as ``topos.io/models`` on the real API server only when it changes,
and read back by the coordinator's Node translation into ``cached_models``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.cycle import Agent
from agent.hardware import open_hardware
from agent.kube import KubeNodeApi
from agent.models import models_annotation, scan_model_cache
from agent.publish import NodePublisher
from agent.settings import AgentSettings
from common import labels as L
from common.kube import NODES, KubeClient
from coordinator.inventory.translate import kube_node, node_fields
from tests.support.kube_objects import create_node


def cache_model(root: Path, model_id: str, files: dict[str, bytes], rev: str = "abc123") -> None:
    """Lay out one model as huggingface_hub does: blobs, a snapshot of links, refs/main."""
    folder = root / ("models--" + model_id.replace("/", "--"))
    snap = folder / "snapshots" / rev
    snap.mkdir(parents=True)
    (folder / "blobs").mkdir(exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(rev)
    for i, (name, content) in enumerate(files.items()):
        blob = folder / "blobs" / f"sha{i}"
        blob.write_bytes(content)
        os.symlink(blob, snap / name)


def test_models_with_files_are_cached_with_their_sizes(tmp_path: Path) -> None:
    cache_model(
        tmp_path, "meta-llama/Llama-3.1-8B", {"config.json": b"{}", "model.bin": b"x" * 1000}
    )
    cache_model(tmp_path, "gpt2", {"config.json": b"{}"})
    empty = tmp_path / "models--org--only-refs"
    (empty / "snapshots" / "r1").mkdir(parents=True)  # a download that never got a file
    (tmp_path / "datasets--org--data" / "snapshots" / "r").mkdir(parents=True)
    (tmp_path / "datasets--org--data" / "snapshots" / "r" / "d.csv").write_text("a")

    models = {m.id: m for m in scan_model_cache(tmp_path)}

    assert set(models) == {"meta-llama/Llama-3.1-8B", "gpt2"}
    llama = models["meta-llama/Llama-3.1-8B"]
    assert (llama.size_bytes, llama.revisions, llama.main) == (1002, ("abc123",), "abc123")
    assert models_annotation(tuple(models.values())) == '["gpt2","meta-llama/Llama-3.1-8B"]'


def test_a_missing_directory_holds_no_models_and_a_broken_link_is_no_file(tmp_path: Path) -> None:
    assert scan_model_cache(tmp_path / "absent") == ()
    snap = tmp_path / "models--org--partial" / "snapshots" / "r"
    snap.mkdir(parents=True)
    os.symlink(tmp_path / "nowhere", snap / "model.bin")
    assert scan_model_cache(tmp_path) == ()


def test_the_annotation_is_bounded(tmp_path: Path) -> None:
    for i in range(40):
        cache_model(tmp_path, f"org/model-{i:02d}", {"f": b"1"})
    text = models_annotation(scan_model_cache(tmp_path), max_bytes=200)
    ids = json.loads(text)
    assert len(text.encode()) <= 200
    assert ids == sorted(ids)
    assert ids[0] == "org/model-00"
    assert len(ids) < 40


def test_the_coordinator_reads_the_annotation_and_ignores_garbage() -> None:
    node = {"metadata": {"name": "n1", "annotations": {L.MODELS: '["org/a","gpt2"]', "x/y": "z"}}}
    assert kube_node(node_fields(node)).cached_models == frozenset({"org/a", "gpt2"})
    bad = {"metadata": {"name": "n1", "annotations": {L.MODELS: "not json"}}}
    assert kube_node(bad).cached_models == frozenset()


@pytest.mark.kube
async def test_the_agent_publishes_the_cache_only_when_it_changes(
    kube: KubeClient, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    name = unique_name("node")
    await create_node(kube, name)
    cache_model(tmp_path, "org/first", {"config.json": b"{}"})
    hardware = open_hardware("dgx-a100", hostname=name)
    try:
        settings = AgentSettings(node_name=name, listen=None, model_cache_dir=str(tmp_path))
        agent = Agent(
            settings, source=hardware.source, publisher=NodePublisher(KubeNodeApi(kube), name)
        )
        first = await agent.cycle()
        again = await agent.cycle()
        annotations = (await kube.get(NODES, name))["metadata"]["annotations"]
        assert json.loads(annotations[L.MODELS]) == ["org/first"]
        assert first.publish is not None
        assert first.publish.patched
        assert again.publish is not None
        assert not again.publish.patched

        cache_model(tmp_path, "org/second", {"config.json": b"{}"})
        third = await agent.cycle()
        assert third.publish is not None
        assert third.publish.changed == (f"annotation:{L.MODELS}",)
        annotations = (await kube.get(NODES, name))["metadata"]["annotations"]
        assert json.loads(annotations[L.MODELS]) == ["org/first", "org/second"]
    finally:
        assert hardware.close is not None
        hardware.close()
