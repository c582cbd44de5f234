"""The domain tree from objects the cluster already keeps, watched live (``gangs.tree.source``):

- ``volcano``: every ``HyperNode`` (``topology.volcano.sh/v1alpha1``), read as one tree by
  :mod:`coordinator.core.domains.hypernodes` on every change; what cannot be used is named in
  ``GET /v1/domains`` (``tree_problems``), logged once per change and posted as a Warning Event
  (``TreeProblem``) about the HyperNode it names (a node in two HyperNodes of one tier: about
  each); the rest is used.
- ``kueue`` / ``kai``: the one ``Topology`` named in the config (``kueue.x-k8s.io/v1beta2``,
  ``kai.scheduler/v1``), its ``spec.levels`` read by
  :func:`coordinator.core.domains.sources.keys_from_levels`. Both projects make the levels
  immutable: a new tree is the object deleted and created again. While it is missing (not yet
  created, deleted, its CRD not installed) or its levels cannot be one tree, the tree it last
  gave is kept, ``tree_problems`` says so, and so does a Warning Event ``TreeProblem`` about the
  coordinator's Pod (``POD_NAME``/``POD_NAMESPACE``), once per reason.

Either way the inventory holds the result (:meth:`~coordinator.inventory.store.Inventory.set_tree`):
each node's ``topos.io/leaf``, ``topos.io/spine`` and ``topos.io/zone`` in Topos's view are the
source's, and nodes whose levels change are re-read by the scheduler like any Node change.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine, Mapping
from typing import Any, Final

from common.kube import KubeClient, KubeError, KubeObject, Resource
from common.kube.recorder import EventRecorder
from common.kube.types import ObjectReference
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.core.domains.hypernodes import HyperNode, build_tree, parse_hypernode
from coordinator.core.domains.sources import NO_LEVELS, LevelsTree, keys_from_levels
from coordinator.inventory.store import Inventory, InventoryEvent

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
        self._node_said: dict[str, str] = {}  # node → its problem last posted
        self._writes: set[asyncio.Task[None]] = set()
        if events is not None:  # a node's own change can put it in two HyperNodes (labelMatch)
            inventory.subscribe(self._node_changed)

    def _node_changed(self, event: InventoryEvent) -> None:
        if not event.pods_only:
            self._tell_nodes([event.node])

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
        self._tell_nodes(None)

    def _tell_nodes(self, names: list[str] | None) -> None:
        """Post the problems of nodes ``names`` (None: every node) not posted yet: a node in
        two HyperNodes of one tier, as the inventory read it from the tree."""
        if self._events is None:
            return
        found = self._inventory.level_problems(names)
        for name in self._node_said.keys() - found.keys() if names is None else names:
            if name not in found:
                self._node_said.pop(name, None)
        for name, problem in found.items():
            if self._node_said.get(name) != problem:
                self._node_said[name] = problem
                self._tell(problem)

    def _tell(self, problem: str) -> None:
        """A Warning Event about the HyperNode ``problem`` names first or, for a node in two
        HyperNodes of one tier, about each of them (off this call)."""
        if self._events is None:
            return
        words = problem.split(maxsplit=2)
        if len(words) >= 2 and words[0] == "HyperNode":
            names = [words[1].rstrip(":")]
        else:
            found = _TWO_HYPERNODES.match(problem)
            names = found.group(1).split(", ") if found else []
        for name in names:
            regarding: ObjectReference = {
                "apiVersion": HYPERNODES.api_version,
                "kind": HYPERNODES.kind,
                "name": name,
            }
            _post(self._events, regarding, problem, self._writes)


#: ``node n-1 is a member of HyperNodes rack-a, rack-b (tier 1): …`` (hypernodes.py's words).
_TWO_HYPERNODES: Final = re.compile(r"^node \S+ is a member of HyperNodes (.+?) \(tier \d+\):")


def _post(
    events: EventRecorder, regarding: ObjectReference, problem: str, writes: set[asyncio.Task[None]]
) -> None:
    """A Warning Event ``TreeProblem`` (aggregated by the recorder: a problem that recurs bumps
    its count), written off this call."""
    write = events.record(regarding, reason="TreeProblem", message=problem, event_type="Warning")
    task = asyncio.get_running_loop().create_task(_quietly(write, regarding["name"]))
    writes.add(task)
    task.add_done_callback(writes.discard)


async def _quietly(write: Coroutine[Any, Any, None], name: str) -> None:
    try:
        await write
    except KubeError as exc:  # the problem is still in /v1/domains and the log
        log.info("no TreeProblem Event about %s: %s", name, exc)


class NamedTopology:
    """A reflector's handler for the one ``Topology`` named (the reflector's field selector
    keeps it to that name). With ``events`` and ``regarding`` (the coordinator's Pod), each new
    reason the object's tree is not in force (missing, deleted, levels refused) is also a Warning
    Event ``TreeProblem`` about that Pod, which ``kubectl describe pod`` shows."""

    def __init__(
        self,
        inventory: Inventory,
        resource: Resource,
        name: str,
        source: str,
        *,
        events: EventRecorder | None = None,
        regarding: ObjectReference | None = None,
    ) -> None:
        self._inventory = inventory
        self._what = f"{resource.kind} {name} ({resource.plural}.{resource.group})"
        self._name = name
        self._source = source
        self._levels: tuple[str, ...] | None = None  # those of the tree in force
        self._noted = True  # a note is shown (the tree in force is not the object's)
        self._events = events
        self._regarding = regarding
        self._said = ""  # the note last posted as an Event (a re-list does not post it again)
        self._writes: set[asyncio.Task[None]] = set()
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
        self._levels, self._noted, self._said = tuple(levels), False, ""
        self._inventory.set_tree(LevelsTree(keys), source=self._source)

    def _keep(self, why: str) -> None:
        """Keep the tree in force and say why it is not replaced."""
        kept = (
            f"the tree of its levels {', '.join(self._levels)} is kept"
            if self._levels is not None
            else "no tree yet: nodes are in no leaf, spine or zone"
        )
        note = f"{self._what}: {why}; {kept}"
        self._noted = True
        self._inventory.set_tree_note(note)
        if note == self._said:
            return  # a re-list finding it as it was
        log.warning("%s", note)
        self._said = note
        if self._events is not None and self._regarding is not None:
            _post(self._events, self._regarding, note, self._writes)


def tree_watch(
    client: KubeClient,
    inventory: Inventory,
    *,
    source: str,
    topology: str = "",
    events_client: KubeClient | None = None,
    own_pod: tuple[str, str] | None = None,
) -> Reflector | None:
    """The reflector that keeps ``inventory``'s tree in step with ``source`` (``None`` for
    ``labels``: the Node labels need no watch of their own). A CRD not installed counts as no
    objects and is asked for again. ``events_client``: the connection tree problems are posted
    through as Events (none: not posted) — about the HyperNodes they name, or, for a named
    ``Topology``, about the coordinator's Pod ``own_pod`` (namespace, name; none: not posted)."""
    events = None if events_client is None else EventRecorder(events_client)
    if source == "volcano":
        return Reflector(
            client, HYPERNODES, HyperNodes(inventory, events), what="HyperNodes", missing_ok=True
        )
    if source in ("kueue", "kai"):
        resource = KUEUE_TOPOLOGIES if source == "kueue" else KAI_TOPOLOGIES
        regarding: ObjectReference | None = None
        if own_pod is not None:
            namespace, pod = own_pod
            regarding = {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace}
        handler = NamedTopology(
            inventory, resource, topology, source, events=events, regarding=regarding
        )
        return Reflector(
            client,
            resource,
            handler,
            field_selector=f"metadata.name={topology}",
            what=f"{source} Topology {topology}",
            missing_ok=True,
        )
    return None
