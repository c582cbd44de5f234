"""Which models are cached on this node: a scan of a Hugging Face hub cache directory.

The layout ``huggingface_hub`` writes (``HF_HUB_CACHE``, e.g. ``~/.cache/huggingface/hub``)::

    models--meta-llama--Llama-3.1-8B/
      refs/main                      the commit the ``main`` branch points at
      snapshots/<commit>/config.json files of one revision (links into blobs/)
      blobs/<sha>                    the content, stored once

A model counts as cached when one of its snapshots holds at least one file; its size is the sum
of its blobs (or, without a ``blobs`` folder, of its snapshots' files). ``datasets--`` and
``spaces--`` folders are not models. The agent publishes the ids as the Node annotation
``topos.io/models`` (docs/labels.md): a compact JSON list, sorted, cut to
:data:`~common.labels.MODELS_ANNOTATION_MAX_BYTES`. The scan runs in a worker thread.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common import labels as L

__all__ = ["CachedModel", "models_annotation", "scan_model_cache"]

_PREFIX: Final = "models--"


@dataclass(frozen=True, slots=True)
class CachedModel:
    id: str  # "org/name" as on the Hub ("gpt2" for a model without an org)
    revisions: tuple[str, ...]  # snapshot commits holding files
    main: str | None  # what refs/main names, when present
    size_bytes: int


def scan_model_cache(root: str | os.PathLike[str]) -> tuple[CachedModel, ...]:
    """The models cached under ``root``, by id. A missing ``root`` holds none; unreadable
    entries are skipped."""
    base = Path(root)
    out: list[CachedModel] = []
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return ()
    for entry in entries:
        if not entry.name.startswith(_PREFIX) or not entry.is_dir():
            continue
        model = _model(Path(entry.path), entry.name.removeprefix(_PREFIX).replace("--", "/", 1))
        if model is not None:
            out.append(model)
    return tuple(out)


def _model(folder: Path, model_id: str) -> CachedModel | None:
    if not model_id or model_id.endswith("/"):
        return None
    revisions: list[str] = []
    snapshot_bytes = 0
    try:
        snapshots = sorted(p for p in (folder / "snapshots").iterdir() if p.is_dir())
    except OSError:
        return None
    for snap in snapshots:
        files = _files(snap)
        if files:
            revisions.append(snap.name)
            snapshot_bytes += sum(files)
    if not revisions:
        return None
    blobs = _files(folder / "blobs")
    try:
        main: str | None = (folder / "refs" / "main").read_text().strip() or None
    except OSError:
        main = None
    return CachedModel(
        id=model_id,
        revisions=tuple(revisions),
        main=main,
        size_bytes=sum(blobs) if blobs else snapshot_bytes,
    )


def _files(folder: Path) -> list[int]:
    """Sizes of the regular files under ``folder`` (links followed; broken links skipped)."""
    sizes: list[int] = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            try:
                sizes.append(os.stat(os.path.join(dirpath, name)).st_size)
            except OSError:
                continue  # a link into a blob not downloaded (yet)
    return sizes


def models_annotation(
    models: tuple[CachedModel, ...], max_bytes: int = L.MODELS_ANNOTATION_MAX_BYTES
) -> str:
    """``["org/a","org/b"]``: the ids, sorted, as many as fit in ``max_bytes``."""
    ids = sorted({m.id for m in models})
    while True:
        text = json.dumps(ids, separators=(",", ":"))
        if len(text.encode()) <= max_bytes or not ids:
            return text
        ids.pop()
