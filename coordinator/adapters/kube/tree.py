"""The domain tree from objects the cluster already keeps, watched live (``gangs.tree.source``):

- ``volcano``: every ``HyperNode`` (``topology.volcano.sh/v1alpha1``), read as one tree by
  :mod:`coordinator.core.domains.hypernodes` on every change; what cannot be used is named in
  ``GET /v1/domains`` (``tree_problems``), logged once per change and, when it names a HyperNode,
  posted as a Warning Event about it (``TreeProblem``); the rest is used.
- ``kueue`` / ``kai``: the one ``Topology`` named in the config (``kueue.x-k8s.io/v1beta2``,
  ``kai.scheduler/v1``), its ``spec.levels`` read by
  :func:`coordinator.core.domains.sources.keys_from_levels`. Both projects make the levels
  immutable: a new tree is the object deleted and created again. While it is missing (not yet
  created, deleted, its CRD not installed) or its levels cannot be one tree, the tree it last
  gave is kept and ``tree_problems`` says so.

Either way the inventory holds the result (:meth:`~coordinator.inventory.store.Inventory.set_tree`):
each node's ``topos.io/leaf``, ``topos.io/spine`` and ``topos.io/zone`` in Topos's view are the
source's, and nodes whose levels change are re-read by the scheduler like any Node change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any, Final

from common.kube import KubeClient, KubeError, KubeObject, Resource
from common.kube.recorder import EventRecorder
from common.kube.types import ObjectReference
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.core.domains.hypernodes import HyperNode, build_tree, parse_hypernode
from coordinator.core.domains.sources import NO_LEVELS, LevelsTree, keys_from_levels
from coordinator.inventory.store import Inventory

log = logging.getLogger(__name__)

__all__ = ["HYPERNODES", "KAI_TOPOLOGIES", "KUEUE_TOPOLOGIES", "tree_watch"]

HYPERNODES: Final = Resource(
    "topology.volcano.sh", "v1alpha1", "hypernodes", namespaced=False, kind="HyperNode"
)
KUEUE_TOPOLOGIES: Final = Resource(
    "kueue.x-k8s.io", "v1beta2", "topologies", namespaced=False, kind="Topology"
)
KAI_TOPOLOGIES: Final = Resource(
    "kai.scheduler", "v1", "topologies", namespaced=False, kind="Topology"
)


def _name(obj: KubeObject) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _spec_only(obj: KubeObject) -> KubeObject:
    """What the tree reads of a HyperNode: its name and spec."""
    return {"metadata": {"name": _name(obj)}, "spec": obj.get("spec")}


class HyperNodes:
    """A reflector's handler: all HyperNodes, read as one tree on every change. With ``events``,
    each new problem naming a HyperNode is also a Warning Event (``TreeProblem``) about it, which
    ``kubectl describe hypernode`` shows."""

    def __init__(self, inventory: Inventory, events: EventRecorder | None = None) -> None:
        self._inventory = inventory
        self._events = events
        self._objects: dict[str, KubeObject] = {}
        self._said: tuple[str, ...] = ()
        self._writes: set[asyncio.Task[None]] = set()

    def replace(self, items: list[KubeObject]) -> None:
        self._objects = {_name(obj): _spec_only(obj) for obj in items}
        self._rebuild()

    def apply(self, kind: Change, obj: KubeObject) -> None:
        name = _name(obj)
        if kind == "DELETED":
            if self._objects.pop(name, None) is None:
                return
        else:
            kept = _spec_only(obj)
            if self._objects.get(name) == kept:
                return  # a status update (Volcano counts the nodes): the tree is as it was
            self._objects[name] = kept
        self._rebuild()

    def _rebuild(self) -> None:
        parsed: list[HyperNode] = []
        problems: list[str] = []
        for name in sorted(self._objects):
            hypernode, found = parse_hypernode(self._objects[name])
            problems.extend(found)
            if hypernode is not None:
                parsed.append(hypernode)
        tree = build_tree(parsed, problems)
        if tree.problems != self._said:
            for problem in tree.problems:
                log.warning("HyperNode tree: %s", problem)
                if problem not in self._said:
                    self._tell(problem)
            self._said = tree.problems
        self._inventory.set_tree(tree, source="volcano")

    def _tell(self, problem: str) -> None:
        """A Warning Event about the HyperNode ``problem`` names first (off this call)."""
        words = problem.split(maxsplit=2)
        if self._events is None or len(words) < 2 or words[0] != "HyperNode":
            return
        name = words[1].rstrip(":")
        regarding: ObjectReference = {
            "apiVersion": HYPERNODES.api_version,
            "kind": HYPERNODES.kind,
            "name": name,
        }
        write = self._events.record(
            regarding, reason="TreeProblem", message=problem, event_type="Warning"
        )
        task = asyncio.get_running_loop().create_task(_quietly(write, name))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)


async def _quietly(write: Coroutine[Any, Any, None], name: str) -> None:
    try:
        await write
    except KubeError as exc:  # the problem is still in /v1/domains and the log
        log.info("no TreeProblem Event about HyperNode %s: %s", name, exc)


class NamedTopology:
    """A reflector's handler for the one ``Topology`` named (the reflector's field selector
    keeps it to that name)."""

    def __init__(self, inventory: Inventory, resource: Resource, name: str, source: str) -> None:
        self._inventory = inventory
        self._what = f"{resource.kind} {name} ({resource.plural}.{resource.group})"
        self._name = name
        self._source = source
        self._levels: tuple[str, ...] | None = None  # those of the tree in force
        self._noted = True  # a note is shown (the tree in force is not the object's)
        inventory.set_tree(NO_LEVELS, source=source, note=f"{self._what}: not read yet")

    def replace(self, items: list[KubeObject]) -> None:
        mine = [obj for obj in items if _name(obj) == self._name]
        if mine:
            self._read(mine[0])
        else:
            self._keep("not found")

    def apply(self, kind: Change, obj: KubeObject) -> None:
        if _name(obj) != self._name:
            return
        if kind == "DELETED":
            self._keep("deleted")
        else:
            self._read(obj)

    def _read(self, obj: KubeObject) -> None:
        spec = obj.get("spec")
        raw = spec.get("levels") if isinstance(spec, Mapping) else None
        levels: list[str] = []
        for i, level in enumerate(raw if isinstance(raw, list) else []):
            label = level.get("nodeLabel") if isinstance(level, Mapping) else None
            if not isinstance(label, str) or not label:
                self._keep(f"spec.levels[{i}].nodeLabel {label!r} is not a label key")
                return
            levels.append(label)
        if not levels:
            self._keep("spec.levels is empty")
            return
        try:
            keys = keys_from_levels(levels)
        except ValueError as bad:
            self._keep(f"spec.levels: {bad}")
            return
        if tuple(levels) == self._levels and not self._noted:
            return  # the same object again (a re-list, its metadata touched): the same tree
        log.info("%s: the tree's levels are %s", self._what, ", ".join(levels))
        self._levels, self._noted = tuple(levels), False
        self._inventory.set_tree(LevelsTree(keys), source=self._source)

    def _keep(self, why: str) -> None:
        """Keep the tree in force and say why it is not replaced."""
        kept = (
            f"the tree of its levels {', '.join(self._levels)} is kept"
            if self._levels is not None
            else "no tree yet: nodes are in no leaf, spine or zone"
        )
        note = f"{self._what}: {why}; {kept}"
        log.warning("%s", note)
        self._noted = True
        self._inventory.set_tree_note(note)


def tree_watch(
    client: KubeClient,
    inventory: Inventory,
    *,
    source: str,
    topology: str = "",
    events_client: KubeClient | None = None,
) -> Reflector | None:
    """The reflector that keeps ``inventory``'s tree in step with ``source`` (``None`` for
    ``labels``: the Node labels need no watch of their own). A CRD not installed counts as no
    objects and is asked for again. ``events_client``: the connection HyperNode problems are posted
    through as Events (none: not posted)."""
    if source == "volcano":
        return Reflector(
            client,
            HYPERNODES,
            HyperNodes(inventory, None if events_client is None else EventRecorder(events_client)),
            what="HyperNodes",
            missing_ok=True,
        )
    if source in ("kueue", "kai"):
        resource = KUEUE_TOPOLOGIES if source == "kueue" else KAI_TOPOLOGIES
        return Reflector(
            client,
            resource,
            NamedTopology(inventory, resource, topology, source),
            field_selector=f"metadata.name={topology}",
            what=f"{source} Topology {topology}",
            missing_ok=True,
        )
    return None
