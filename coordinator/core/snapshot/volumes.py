"""PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes and VolumeAttachments, as
kube-scheduler's VolumeBinding and NodeVolumeLimits plugins read them: :class:`Volumes`.

The adapters keep one instance current (:meth:`Volumes.put` with each object as the API server
returns it, :meth:`Volumes.remove`, :meth:`Volumes.clear` before a fresh list), as they keep
:class:`~coordinator.core.snapshot.workloads.WorkloadSelectors`; a snapshot reads it as it is at
the start of a cycle. Each object is parsed once, on arrival. One that cannot be read (a PV whose
``spec.nodeAffinity`` has an unknown operator, a quantity that does not parse) is left out and
its error kept (:meth:`Volumes.error`): a pod whose claim names it is refused with that error,
naming the object and the field. Every change calls :attr:`Volumes.on_change` with the object's
kind and key (the engine sends the pods it may help back to the queue), but a
VolumeAttachment's: only its deletion calls :attr:`Volumes.on_detach` (kube-scheduler's
NodeVolumeLimits is woken by nothing else).

:func:`find_matching_volume` is component-helpers' ``FindMatchingVolume`` for a node (the
scheduler's path): the smallest available PV of the claim's class that the node reaches, with
room, access modes, volume mode and the claim's selector, or the PV already bound to it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, Literal, get_args

from common.quantity import QuantityError, parse_quantity
from coordinator.core.podspec.affinity import label_selector, node_selector
from coordinator.core.podspec.fields import (
    FieldError,
    entry,
    mapping,
    sequence,
    str_map,
    text,
)
from coordinator.core.podspec.intree import translate_pv
from coordinator.core.podspec.selectors import LabelSelector, NodeSelectorTerm, Requirement

__all__ = [
    "ANN_SELECTED_NODE",
    "Attachment",
    "CSINode",
    "Claim",
    "StorageClass",
    "Volume",
    "VolumeKind",
    "VolumeWrites",
    "Volumes",
    "find_matching_volume",
    "parse_attachment",
    "parse_claim",
    "parse_csi_node",
    "parse_storage_class",
    "parse_volume",
]

VolumeKind = Literal[
    "PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode", "VolumeAttachment"
]

#: Written on a claim by the scheduler's PreBind: the PV controller (or an external
#: provisioner) provisions a WaitForFirstConsumer claim's volume for this node.
ANN_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
#: Set by the PV controller once a claim's binding is complete.
ANN_BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER: Final = "pv.kubernetes.io/bound-by-controller"
_ANN_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"
#: A class with this provisioner (or none) provisions nothing.
NOT_SUPPORTED_PROVISIONER: Final = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"


class VolumeObjectError(Exception):
    """An object that cannot be read: the field and what is wrong with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")


def _class_of(meta: Mapping[str, object], spec: Mapping[str, object]) -> str:
    """``GetPersistentVolume(Claim)Class``: the beta annotation, else ``spec.storageClassName``."""
    annotations = str_map(meta, "annotations", "metadata")
    if _ANN_STORAGE_CLASS in annotations:
        return annotations[_ANN_STORAGE_CLASS]
    return text(spec, "storageClassName", "spec")


def _storage(raw: Mapping[str, object], path: str) -> Fraction:
    value = raw.get("storage")
    if value is None:
        return Fraction(0)
    try:
        return parse_quantity(value)
    except QuantityError as bad:
        raise FieldError(f"{path}.storage", str(bad)) from None


def _modes(spec: Mapping[str, object]) -> frozenset[str]:
    return frozenset(str(m) for m in sequence(spec, "accessModes", "spec"))


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim, the parts scheduling reads."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    volume_name: str = ""  # spec.volumeName: bound (or pre-bound) to this PV
    storage_class: str = ""
    access_modes: frozenset[str] = frozenset()
    request: Fraction = Fraction(0)  # spec.resources.requests.storage, bytes
    volume_mode: str = "Filesystem"
    selector: LabelSelector | None = None
    phase: str = "Pending"
    deleting: bool = False
    bind_completed: bool = False
    selected_node: str = ""
    owner_uid: str = ""  # the controller ownerReference's UID (an ephemeral volume's pod)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """Fully bound (kube's ``isPVCFullyBound``): a PV named and the binding completed."""
        return bool(self.volume_name) and self.bind_completed


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume, the parts scheduling reads."""

    name: str
    resource_version: str = ""
    labels: Mapping[str, str] | None = None
    capacity: Fraction = Fraction(0)
    access_modes: frozenset[str] = frozenset()
    storage_class: str = ""
    volume_mode: str = "Filesystem"
    #: spec.nodeAffinity.required's terms (``None``: any node)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    claim_ref: tuple[str, str, str] | None = None  # (namespace, name, uid)
    phase: str = "Available"
    deleting: bool = False
    #: (driver, volume handle) it attaches as: ``spec.csi``, or an in-tree source's translation
    #: (:func:`~coordinator.core.podspec.intree.translate_pv`; ``None``: no CSI driver counts it)
    csi: tuple[str, str] | None = None
    #: ``csi`` is an in-tree source's translation (a VolumeAttachment counts only ``spec.csi``)
    in_tree: bool = False

    def reaches(self, labels: Mapping[str, str]) -> bool:
        """``CheckNodeAffinity``: kube matches the terms against a node that has only labels, so
        a ``matchFields`` term matches no node."""
        if self.node_affinity is None:
            return True
        return any(t.matches("", labels) for t in self.node_affinity)

    def bound_to(self, claim: Claim) -> bool:
        """``IsVolumeBoundToClaim``."""
        ref = self.claim_ref
        if ref is None or ref[0] != claim.namespace or ref[1] != claim.name:
            return False
        return not ref[2] or ref[2] == claim.uid


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: str | None = None  # volumeBindingMode (``None``: not set)
    #: allowedTopologies as node selector terms (``()``: any node)
    allowed_topologies: tuple[NodeSelectorTerm, ...] = ()

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NOT_SUPPORTED_PROVISIONER

    def allows(self, labels: Mapping[str, str]) -> bool:
        """``MatchTopologySelectorTerms``: no terms match every node."""
        return not self.allowed_topologies or any(
            t.matches("", labels) for t in self.allowed_topologies
        )


@dataclass(frozen=True, slots=True)
class VolumeWrites:
    """What binding a pod's WaitForFirstConsumer claims to its node takes, before the pod's
    Binding (kube-scheduler's PreBind): each static PV matched gets ``spec.claimRef`` (the PV
    controller completes the binding), each claim to provision ``volume.kubernetes.io/
    selected-node``."""

    node: str
    bind: tuple[tuple[Volume, Claim], ...] = ()
    provision: tuple[Claim, ...] = ()


def _meta(obj: Mapping[str, object]) -> tuple[Mapping[str, object], Mapping[str, object]]:
    return mapping(obj, "metadata", ""), mapping(obj, "spec", "")


def parse_claim(obj: Mapping[str, object]) -> Claim:
    try:
        meta, spec = _meta(obj)
        annotations = str_map(meta, "annotations", "metadata")
        requests = mapping(mapping(spec, "resources", "spec"), "requests", "spec.resources")
        owner = ""
        for i, ref in enumerate(sequence(meta, "ownerReferences", "metadata")):
            e = entry(ref, f"metadata.ownerReferences[{i}]")
            if e.get("controller") is True:
                owner = text(e, "uid", f"metadata.ownerReferences[{i}]")
        raw_selector = spec.get("selector")
        return Claim(
            namespace=text(meta, "namespace", "metadata") or "default",
            name=text(meta, "name", "metadata"),
            uid=text(meta, "uid", "metadata"),
            resource_version=text(meta, "resourceVersion", "metadata"),
            volume_name=text(spec, "volumeName", "spec"),
            storage_class=_class_of(meta, spec),
            access_modes=_modes(spec),
            request=_storage(requests, "spec.resources.requests"),
            volume_mode=text(spec, "volumeMode", "spec") or "Filesystem",
            selector=label_selector(raw_selector, "spec.selector") if raw_selector else None,
            phase=text(mapping(obj, "status", ""), "phase", "status") or "Pending",
            deleting=meta.get("deletionTimestamp") is not None,
            bind_completed=ANN_BIND_COMPLETED in annotations,
            selected_node=annotations.get(ANN_SELECTED_NODE, ""),
            owner_uid=owner,
        )
    except FieldError as bad:
        raise VolumeObjectError(bad.field.lstrip("."), bad.message) from None


def parse_volume(obj: Mapping[str, object]) -> Volume:
    try:
        meta, spec = _meta(obj)
        affinity = mapping(spec, "nodeAffinity", "spec")
        required = affinity.get("required")
        terms = (
            node_selector(required, "spec.nodeAffinity.required") if required is not None else None
        )
        labels = str_map(meta, "labels", "metadata")
        ref = mapping(spec, "claimRef", "spec")
        claim_ref = (
            (
                text(ref, "namespace", "spec.claimRef") or "default",
                text(ref, "name", "spec.claimRef"),
                text(ref, "uid", "spec.claimRef"),
            )
            if ref
            else None
        )
        return Volume(
            name=text(meta, "name", "metadata"),
            resource_version=text(meta, "resourceVersion", "metadata"),
            labels=labels,
            capacity=_storage(mapping(spec, "capacity", "spec"), "spec.capacity"),
            access_modes=_modes(spec),
            storage_class=_class_of(meta, spec),
            volume_mode=text(spec, "volumeMode", "spec") or "Filesystem",
            node_affinity=terms,
            claim_ref=claim_ref,
            phase=text(mapping(obj, "status", ""), "phase", "status") or "Available",
            deleting=meta.get("deletionTimestamp") is not None,
            csi=translate_pv(spec, labels),
            in_tree=not mapping(spec, "csi", "spec"),
        )
    except FieldError as bad:
        raise VolumeObjectError(bad.field.lstrip("."), bad.message) from None


def parse_storage_class(obj: Mapping[str, object]) -> StorageClass:
    try:
        meta = mapping(obj, "metadata", "")
        terms: list[NodeSelectorTerm] = []
        for i, item in enumerate(sequence(obj, "allowedTopologies", "")):
            path = f"allowedTopologies[{i}]"
            reqs: list[Requirement] = []
            for j, raw in enumerate(sequence(entry(item, path), "matchLabelExpressions", path)):
                p = f"{path}.matchLabelExpressions[{j}]"
                e = entry(raw, p)
                key = text(e, "key", p)
                values = tuple(str(v) for v in sequence(e, "values", p))
                if not key or not values:
                    raise FieldError(p, "needs a key and at least one value")
                reqs.append(Requirement(key, "In", values))
            terms.append(NodeSelectorTerm(tuple(reqs)))
        mode = obj.get("volumeBindingMode")
        return StorageClass(
            name=text(meta, "name", "metadata"),
            provisioner=text(obj, "provisioner", ""),
            binding_mode=str(mode) if mode is not None else None,
            allowed_topologies=tuple(terms),
        )
    except FieldError as bad:
        raise VolumeObjectError(bad.field.lstrip("."), bad.message) from None


@dataclass(frozen=True, slots=True)
class CSINode:
    """A node's CSINode: how many volumes each driver may attach there
    (``spec.drivers[].allocatable.count``; a driver without a count is not limited)."""

    name: str
    limits: Mapping[str, int]


def parse_csi_node(obj: Mapping[str, object]) -> CSINode:
    try:
        meta, spec = _meta(obj)
        limits: dict[str, int] = {}
        for i, raw in enumerate(sequence(spec, "drivers", "spec")):
            path = f"spec.drivers[{i}]"
            driver = entry(raw, path)
            count = mapping(driver, "allocatable", path).get("count")
            if count is None:
                continue
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise FieldError(f"{path}.allocatable.count", f"{count!r} is not a count")
            limits[text(driver, "name", path)] = count
        return CSINode(name=text(meta, "name", "metadata"), limits=limits)
    except FieldError as bad:
        raise VolumeObjectError(bad.field.lstrip("."), bad.message) from None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A VolumeAttachment: ``spec.attacher`` attaches PV ``spec.source.persistentVolumeName``
    (``""``: an inline volume's) to node ``spec.nodeName``."""

    name: str
    node: str
    attacher: str
    volume: str = ""


def parse_attachment(obj: Mapping[str, object]) -> Attachment:
    try:
        meta, spec = _meta(obj)
        return Attachment(
            name=text(meta, "name", "metadata"),
            node=text(spec, "nodeName", "spec"),
            attacher=text(spec, "attacher", "spec"),
            volume=text(mapping(spec, "source", "spec"), "persistentVolumeName", "spec.source"),
        )
    except FieldError as bad:
        raise VolumeObjectError(bad.field.lstrip("."), bad.message) from None


def find_matching_volume(
    claim: Claim,
    volumes: Iterable[Volume],
    labels: Mapping[str, str],
    excluded: Collection[str] = (),
) -> Volume | None:
    """The PV ``claim`` gets on a node with ``labels`` (component-helpers'
    ``FindMatchingVolume`` with a node): one already bound to it if the node reaches it, else
    the smallest available one that fits; ``None`` when none does."""
    best: Volume | None = None
    for v in volumes:
        if v.name in excluded:
            continue
        bound = v.bound_to(claim)
        if v.claim_ref is not None and not bound:
            continue
        if v.capacity < claim.request or v.volume_mode != claim.volume_mode or v.deleting:
            continue
        reaches = v.reaches(labels)
        if bound:
            return v if reaches else None
        if v.phase != "Available":
            continue
        if claim.selector is not None and not claim.selector.matches(v.labels or {}):
            continue
        if v.storage_class != claim.storage_class or not reaches:
            continue
        if not claim.access_modes <= v.access_modes:
            continue
        if best is None or v.capacity < best.capacity:
            best = v
    return best


class Volumes:
    """Event-loop only (a cycle reads it between changes)."""

    __slots__ = (
        "_attachments",
        "_by_class",
        "_by_node",
        "_claims",
        "_classes",
        "_csi_nodes",
        "_errors",
        "_raw",
        "_volumes",
        "on_change",
        "on_detach",
        "version",
    )

    def __init__(self) -> None:
        #: Every object as last given, by kind and key (read or not): what a copy of the
        #: cluster carries (the forecast's).
        self._raw: dict[VolumeKind, dict[str, Mapping[str, object]]] = {
            kind: {} for kind in get_args(VolumeKind)
        }
        self._claims: dict[str, Claim] = {}
        self._volumes: dict[str, Volume] = {}
        self._by_class: dict[str, dict[str, Volume]] = {}
        self._classes: dict[str, StorageClass] = {}
        self._csi_nodes: dict[str, CSINode] = {}
        self._attachments: dict[str, Attachment] = {}
        self._by_node: dict[str, dict[str, Attachment]] = {}
        self._errors: dict[tuple[VolumeKind, str], str] = {}
        #: Called with the kind and key (``namespace/name`` for a claim, else the name; ``""``:
        #: any object of the kind, after a fresh list) after every change but a
        #: VolumeAttachment's.
        self.on_change: Callable[[VolumeKind, str], None] = lambda _kind, _key: None
        #: Called with its attacher when a VolumeAttachment is deleted (a node's volume slot
        #: freed); one added or changed calls nothing, as in kube-scheduler.
        self.on_detach: Callable[[str], None] = lambda _attacher: None
        #: Raised at every change (attachments included): what is computed from these objects
        #: may be kept while it stands (NodeVolumeLimits' count of a node's volumes).
        self.version = 0

    # --- what a cycle reads -------------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> Claim | None:
        return self._claims.get(f"{namespace}/{name}")

    def volume(self, name: str) -> Volume | None:
        return self._volumes.get(name)

    def storage_class(self, name: str) -> StorageClass | None:
        return self._classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        """Node ``name``'s CSINode (``None``: none, or one that cannot be read)."""
        return self._csi_nodes.get(name)

    def attachments(self, node: str) -> Collection[Attachment]:
        """The VolumeAttachments of node ``node``."""
        return (self._by_node.get(node) or {}).values()

    def of_class(self, name: str) -> Collection[Volume]:
        """The PVs of StorageClass ``name`` (``""``: those without a class)."""
        return (self._by_class.get(name) or {}).values()

    def error(self, kind: VolumeKind, key: str) -> str | None:
        """Why the object ``key`` (``namespace/name`` for a claim, else its name) was left
        out, while it stays unreadable."""
        return self._errors.get((kind, key))

    def objects(self, kind: VolumeKind) -> Mapping[str, Mapping[str, object]]:
        """Every object of ``kind`` as last given (read or not), by key; read-only."""
        return self._raw[kind]

    # --- what the adapters call ---------------------------------------------------------------
    def put(self, kind: VolumeKind, obj: Mapping[str, object]) -> None:
        """An object added or changed, as the API server returns it."""
        self.version += 1
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name = str(meta.get("name") or "")
        key = (
            f"{meta.get('namespace') or 'default'}/{name}"
            if kind == "PersistentVolumeClaim"
            else name
        )
        self._drop(kind, key)
        self._raw[kind][key] = obj
        try:
            if kind == "PersistentVolumeClaim":
                self._claims[key] = parse_claim(obj)
            elif kind == "PersistentVolume":
                v = parse_volume(obj)
                self._volumes[key] = v
                self._by_class.setdefault(v.storage_class, {})[key] = v
            elif kind == "StorageClass":
                self._classes[key] = parse_storage_class(obj)
            elif kind == "CSINode":
                self._csi_nodes[key] = parse_csi_node(obj)
            else:
                a = parse_attachment(obj)
                self._attachments[key] = a
                self._by_node.setdefault(a.node, {})[key] = a
        except VolumeObjectError as bad:
            self._errors[(kind, key)] = str(bad)
        if kind != "VolumeAttachment":
            self.on_change(kind, key)

    def remove(self, kind: VolumeKind, key: str) -> None:
        self.version += 1
        attachment = self._attachments.get(key) if kind == "VolumeAttachment" else None
        self._drop(kind, key)
        if kind != "VolumeAttachment":
            self.on_change(kind, key)
        elif attachment is not None:
            self.on_detach(attachment.attacher)

    def clear(self, kind: VolumeKind) -> None:
        """Before a fresh list of ``kind``."""
        self.version += 1
        self._raw[kind].clear()
        if kind == "PersistentVolumeClaim":
            self._claims.clear()
        elif kind == "PersistentVolume":
            self._volumes.clear()
            self._by_class.clear()
        elif kind == "StorageClass":
            self._classes.clear()
        elif kind == "CSINode":
            self._csi_nodes.clear()
        else:
            self._attachments.clear()
            self._by_node.clear()
        for k in [k for k in self._errors if k[0] == kind]:
            del self._errors[k]

    def _drop(self, kind: VolumeKind, key: str) -> None:
        self._errors.pop((kind, key), None)
        self._raw[kind].pop(key, None)
        if kind == "PersistentVolumeClaim":
            self._claims.pop(key, None)
        elif kind == "PersistentVolume":
            old = self._volumes.pop(key, None)
            if old is not None:
                self._by_class.get(old.storage_class, {}).pop(key, None)
        elif kind == "StorageClass":
            self._classes.pop(key, None)
        elif kind == "CSINode":
            self._csi_nodes.pop(key, None)
        else:
            gone = self._attachments.pop(key, None)
            if gone is not None:
                on_node = self._by_node.get(gone.node, {})
                on_node.pop(key, None)
                if not on_node:
                    self._by_node.pop(gone.node, None)
