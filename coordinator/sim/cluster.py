"""Cluster descriptions for simulation: groups of nodes made from hardware profiles, laid out in
leaves and spines (format in ``docs/simulate.md``)::

    name: lab
    layout: {nodesPerLeaf: 4, leavesPerSpine: 2}   # automatic leaf/spine labels, in order
    nodes:
      - profile: dgx-h100          # built-in profile name, or a profile file
        count: 8
      - profile: a100-mig
        count: 4
        namePrefix: mig             # node names mig-001 … (default: the profile name)
        leaf: leaf-9                # explicit domains win over the automatic layout
        spine: spine-2
        labels: {pool: inference}
    costModel:                      # optional: override the communication-cost factors
      link: {PIX: 1.1}
      network: {spine: 1.3}

The description is pure data; turning a profile into a :class:`~common.model.NodeTopology` is
the caller's job (the CLI uses the agent's profile-driven fake NVML), so this module stays free
of hardware code. :func:`build_nodes` makes the scheduling core's ``NodeInfo`` for each node with
the labels its agent publishes (the agent's own labelers, :mod:`common.labeling`) and the
allocatable resources its kubelet and device plugin would advertise.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import yaml

from common import labels as L
from common import podkeys
from common.allocatable import allocatable_from_topology
from common.labeling import labels as agent_labels
from common.model import NodeTopology
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.sim.costmodel import CostModel, CostModelError, cost_model_from

__all__ = [
    "ClusterError",
    "ClusterSpec",
    "NodeGroup",
    "NodeSpec",
    "build_nodes",
    "parse_cluster",
]

_NAME_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$")
MAX_NODES: Final = 100_000


class ClusterError(ValueError):
    """A cluster description that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    profile: str
    count: int
    name_prefix: str
    leaf: str | None = None
    spine: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    name: str
    profile: str
    leaf: str | None
    spine: str | None
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    name: str
    groups: tuple[NodeGroup, ...]
    nodes_per_leaf: int | None = None
    leaves_per_spine: int | None = None
    cost_model: CostModel = field(default_factory=CostModel)

    def node_specs(self) -> list[NodeSpec]:
        """Every node with its name and network domains (automatic layout applied in order)."""
        out: list[NodeSpec] = []
        counters: dict[str, int] = {}
        auto = 0  # nodes laid out automatically so far
        for g in self.groups:
            for _ in range(g.count):
                counters[g.name_prefix] = counters.get(g.name_prefix, 0) + 1
                name = f"{g.name_prefix}-{counters[g.name_prefix]:03d}"
                leaf, spine = g.leaf, g.spine
                if leaf is None and self.nodes_per_leaf:
                    index = auto // self.nodes_per_leaf
                    leaf = f"leaf-{index + 1}"
                    if spine is None and self.leaves_per_spine:
                        spine = f"spine-{index // self.leaves_per_spine + 1}"
                    auto += 1
                out.append(
                    NodeSpec(name=name, profile=g.profile, leaf=leaf, spine=spine, labels=g.labels)
                )
        return out

    @property
    def node_count(self) -> int:
        return sum(g.count for g in self.groups)


def _str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ClusterError(f"{where} must be a non-empty string")
    return value.strip()


def _count(value: object, where: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ClusterError(f"{where} must be a whole number ≥ {minimum}, not {value!r}")
    return value


def _domain(value: object, where: str) -> str:
    text = _str(value, where)
    if not L.is_label_value(text):
        raise ClusterError(f"{where} {text!r} is not a valid label value")
    return text


def parse_cluster(text: str, *, name: str = "cluster") -> ClusterSpec:
    """Read a cluster description (YAML)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterError(f"{name} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ClusterError(f"{name}: expected a mapping with a 'nodes' list at the top level")
    known = {"name", "layout", "nodes", "costModel"}
    extra = sorted(str(k) for k in doc if k not in known)
    if extra:
        raise ClusterError(f"{name}: unknown key {extra[0]!r} (known: {', '.join(sorted(known))})")
    layout = doc.get("layout") or {}
    if not isinstance(layout, dict):
        raise ClusterError(f"{name}: layout must be a mapping")
    for key in layout:
        if key not in ("nodesPerLeaf", "leavesPerSpine"):
            raise ClusterError(f"{name}: unknown key layout.{key}")
    per_leaf = layout.get("nodesPerLeaf")
    per_spine = layout.get("leavesPerSpine")
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ClusterError(f"{name}: nodes must be a non-empty list of node groups")
    groups: list[NodeGroup] = []
    total = 0
    for i, raw in enumerate(raw_nodes):
        where = f"{name}: nodes[{i}]"
        if not isinstance(raw, dict):
            raise ClusterError(f"{where} must be a mapping with profile and count")
        for key in raw:
            if key not in ("profile", "count", "namePrefix", "leaf", "spine", "labels"):
                raise ClusterError(f"{where}: unknown key {key!r}")
        profile = _str(raw.get("profile"), f"{where}.profile")
        count = _count(raw.get("count", 1), f"{where}.count")
        total += count
        if total > MAX_NODES:
            raise ClusterError(f"{name}: more than {MAX_NODES} nodes")
        default_prefix = re.sub(r"[^a-z0-9-]+", "-", profile.rsplit("/", 1)[-1].lower())
        default_prefix = re.sub(r"\.(ya?ml)$", "", default_prefix).strip("-")[:40] or "node"
        prefix = raw.get("namePrefix", default_prefix)
        if not isinstance(prefix, str) or not _NAME_RE.match(prefix):
            raise ClusterError(
                f"{where}.namePrefix {prefix!r} must be lower-case letters, digits and '-'"
            )
        labels_raw = raw.get("labels") or {}
        if not isinstance(labels_raw, dict):
            raise ClusterError(f"{where}.labels must be a mapping")
        labels: dict[str, str] = {}
        for k, v in labels_raw.items():
            if not isinstance(k, str) or not L.is_label_key(k):
                raise ClusterError(f"{where}.labels: {k!r} is not a valid label key")
            value = str(v) if isinstance(v, str | int | float) and not isinstance(v, bool) else ""
            if not L.is_label_value(value):
                raise ClusterError(f"{where}.labels[{k}]: {v!r} is not a valid label value")
            labels[k] = value
        groups.append(
            NodeGroup(
                profile=profile,
                count=count,
                name_prefix=prefix,
                leaf=None if raw.get("leaf") is None else _domain(raw["leaf"], f"{where}.leaf"),
                spine=None if raw.get("spine") is None else _domain(raw["spine"], f"{where}.spine"),
                labels=labels,
            )
        )
    try:
        cost = cost_model_from(doc.get("costModel"))
    except CostModelError as exc:
        raise ClusterError(f"{name}: costModel: {exc}") from None
    return ClusterSpec(
        name=str(doc.get("name") or name),
        groups=tuple(groups),
        nodes_per_leaf=None if per_leaf is None else _count(per_leaf, "layout.nodesPerLeaf"),
        leaves_per_spine=None if per_spine is None else _count(per_spine, "layout.leavesPerSpine"),
        cost_model=cost,
    )


def node_labels(agent: Mapping[str, str], spec: NodeSpec) -> dict[str, str]:
    """A node's labels: what its agent publishes (``agent``: :func:`common.labeling.labels` of
    its hardware), the kubelet's hostname, the operator's leaf and spine, then the description's
    own labels (which win)."""
    out: dict[str, str] = {**agent, "kubernetes.io/hostname": spec.name}
    if spec.leaf:
        out[L.LEAF] = spec.leaf
    if spec.spine:
        out[L.SPINE] = spec.spine
    out.update(spec.labels)
    return out


def _own_devices(topology: NodeTopology, name: str) -> NodeTopology:
    """The profile's hardware under ``name``, every GPU and MIG device with a UUID of its own
    (derived from the node's name: the inventory refuses a device two nodes report)."""

    def own(value: str | None) -> str | None:
        if value is None:
            return None
        prefix = "MIG-" if value.startswith("MIG-") else "GPU-"
        return prefix + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{value}"))

    gpus = tuple(
        msgspec.structs.replace(
            gpu,
            uuid=own(gpu.uuid) or gpu.uuid,
            mig_instances=tuple(
                msgspec.structs.replace(m, uuid=own(m.uuid)) for m in gpu.mig_instances
            ),
        )
        for gpu in topology.gpus
    )
    return msgspec.structs.replace(topology, hostname=name, gpus=gpus)


def build_nodes(spec: ClusterSpec, topology_of: Callable[[str], NodeTopology]) -> list[NodeInfo]:
    """One ``NodeInfo`` per node; ``topology_of(profile)`` gives the hardware of a profile (it is
    called once per distinct profile; each node gets a copy under its own hostname). Node labels
    are the agent's own labelers' output with the default settings, computed once per profile:
    labels depend on the hardware, never on the hostname."""
    cache: dict[str, tuple[NodeTopology, Mapping[str, str]]] = {}
    out: list[NodeInfo] = []
    for node in spec.node_specs():
        known = cache.get(node.profile)
        if known is None:
            hardware = topology_of(node.profile)
            known = cache[node.profile] = (hardware, agent_labels(hardware).labels)
        base, agent = known
        topology = _own_devices(base, node.name)
        out.append(
            NodeInfo.build(
                node.name,
                labels=node_labels(agent, node),
                allocatable=allocatable_from_topology(topology),
                topology=topology,
            )
        )
    return out


def profiles_of(spec: ClusterSpec) -> Sequence[str]:
    return tuple(dict.fromkeys(g.profile for g in spec.groups))


def describe(nodes: Sequence[NodeInfo]) -> dict[str, Any]:
    """Counts for report headers: nodes, whole GPUs, MIG instances, leaves, spines."""
    gpus = sum(n.allocatable.get(podkeys.GPU_RESOURCE, 0) for n in nodes)
    mig = sum(
        v
        for n in nodes
        for k, v in n.allocatable.items()
        if k.startswith(podkeys.MIG_RESOURCE_PREFIX)
    )
    leaves = {n.labels.get(L.LEAF) for n in nodes} - {None}
    spines = {n.labels.get(L.SPINE) for n in nodes} - {None}
    return {
        "nodes": len(nodes),
        "gpus": gpus,
        "mig_instances": mig,
        "leaves": len(leaves),
        "spines": len(spines),
    }
