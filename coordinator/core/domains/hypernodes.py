"""Volcano's HyperNodes (``topology.volcano.sh/v1alpha1``) read as Topos's domain tree.

A HyperNode groups nodes (members of type ``Node``) or narrower HyperNodes (type ``HyperNode``)
at a ``spec.tier``; members are chosen by ``exactMatch.name``, ``regexMatch.pattern`` (searched in
the name, as Volcano's ``regexp.MatchString``) or, for nodes, ``labelMatch`` (a label selector).
The distinct tiers in use, narrowest first, are Topos's leaf, spine and zone
(:data:`~.sources.SOURCE_KEYS`); a node's levels are the HyperNode that holds it and that
HyperNode's parents. NVLink cliques still come from ``nvidia.com/gpu.clique``.

What cannot be one tree is named — the HyperNode and the member — and left out, and the rest of
the tree is used:

* a HyperNode reachable from itself (a cycle): the members that close it are not used;
* a member naming a HyperNode that does not exist, a pattern that is no regular expression, a
  ``labelMatch`` on a HyperNode member (Volcano reads it only for nodes);
* a HyperNode that is a member of two HyperNodes of one tier (its parent is the narrowest
  HyperNode holding it), or of one no broader than itself: it gets no parent;
* a node in two HyperNodes of one tier: it is in neither (it falls back to the level above when
  both have the same parent).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from coordinator.core.domains.sources import LEVEL_KEYS
from coordinator.core.podspec.affinity import label_selector
from coordinator.core.podspec.fields import FieldError
from coordinator.core.podspec.selectors import LabelSelector

__all__ = ["HyperNode", "HyperNodeTree", "Member", "build_tree", "parse_hypernode"]

MemberType = Literal["Node", "HyperNode"]


@dataclass(frozen=True, slots=True)
class Member:
    """One ``spec.members[]`` entry (exactly one of the three selectors is set)."""

    type: MemberType
    where: str  # "members[2]" — for messages
    exact: str | None = None
    pattern: re.Pattern[str] | None = None
    labels: LabelSelector | None = None

    def matches(self, name: str, labels: Mapping[str, str] | None = None) -> bool:
        if self.exact is not None:
            return name == self.exact
        if self.pattern is not None:
            return self.pattern.search(name) is not None
        return self.labels is not None and labels is not None and self.labels.matches(labels)


@dataclass(frozen=True, slots=True)
class HyperNode:
    name: str
    tier: int
    members: tuple[Member, ...]


def parse_hypernode(obj: Mapping[str, object]) -> tuple[HyperNode | None, list[str]]:
    """A HyperNode object as Topos reads it, and what of it cannot be used (each problem names
    the HyperNode and the member). ``None`` when it has no name or no usable tier."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        return None, ["a HyperNode without metadata.name is ignored"]
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    tier = spec.get("tier")
    if not isinstance(tier, int) or isinstance(tier, bool) or tier < 0:
        return None, [f"HyperNode {name}: spec.tier {tier!r} is not a tier (0 or more): ignored"]
    problems: list[str] = []
    members: list[Member] = []
    raw_members = spec.get("members")
    for i, raw in enumerate(raw_members if isinstance(raw_members, list) else []):
        member, problem = _member(name, i, raw)
        if member is not None:
            members.append(member)
        if problem is not None:
            problems.append(problem)
    return HyperNode(name, tier, tuple(members)), problems


def _member(owner: str, i: int, raw: object) -> tuple[Member | None, str | None]:
    where = f"members[{i}]"
    here = f"HyperNode {owner}: {where}"
    if not isinstance(raw, Mapping):
        return None, f"{here} is not an object: not used"
    kind = raw.get("type")
    if kind not in ("Node", "HyperNode"):
        return None, f"{here}.type {kind!r} is neither Node nor HyperNode: not used"
    selector = raw.get("selector")
    selector = selector if isinstance(selector, Mapping) else {}
    exact, regex, by_labels = (
        selector.get("exactMatch"),
        selector.get("regexMatch"),
        selector.get("labelMatch"),
    )
    if sum(x is not None for x in (exact, regex, by_labels)) != 1:
        return None, (
            f"{here}.selector needs exactly one of exactMatch, regexMatch, labelMatch: not used"
        )
    if isinstance(exact, Mapping):
        value = exact.get("name")
        if isinstance(value, str) and value:
            return Member(kind, where, exact=value), None
        return None, f"{here}.selector.exactMatch.name {value!r} is not a name: not used"
    if isinstance(regex, Mapping):
        pattern = regex.get("pattern")
        try:
            compiled = re.compile(str(pattern)) if isinstance(pattern, str) and pattern else None
        except re.error as bad:
            return None, (
                f"{here}.selector.regexMatch.pattern {pattern!r} is not a regular expression "
                f"({bad}): not used"
            )
        if compiled is None:
            return None, f"{here}.selector.regexMatch.pattern {pattern!r} is empty: not used"
        return Member(kind, where, pattern=compiled), None
    if kind == "HyperNode":
        return None, f"{here}: labelMatch selects only nodes, not HyperNodes: not used"
    try:
        parsed = label_selector(by_labels, f"{where}.selector.labelMatch")
    except FieldError as bad:
        return None, f"HyperNode {owner}: {bad}: not used"
    if parsed is None or parsed.is_empty:
        return None, f"{here}.selector.labelMatch is empty (Volcano selects nothing): not used"
    return Member(kind, where, labels=parsed), None


@dataclass(frozen=True, slots=True)
class HyperNodeTree:
    """The usable part of a set of HyperNodes: who is whose parent, which tier is which level."""

    hypernodes: Mapping[str, HyperNode]
    parent: Mapping[str, str]  # HyperNode → the HyperNode it is a member of
    level_of_tier: Mapping[int, str]  # tier → the label key of its level (leaf, spine, zone)
    problems: tuple[str, ...] = ()
    # Where a node is looked up: by name, the HyperNodes naming it in an ``exactMatch`` member;
    # the HyperNodes with a pattern or label member of type Node, tried on every node.
    _named: Mapping[str, tuple[HyperNode, ...]] = field(default_factory=dict, repr=False)
    _scanned: tuple[HyperNode, ...] = field(default=(), repr=False)

    def levels_of(self, node: str, labels: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
        """The node's leaf, spine and zone (label key → HyperNode name), and why a level it is
        in is not used (``None`` when nothing is wrong)."""
        found = {h.name: h for h in self._named.get(node, ())}
        for h in self._scanned:
            if h.name not in found and any(
                m.type == "Node" and m.exact is None and m.matches(node, labels) for m in h.members
            ):
                found[h.name] = h
        if not found:
            return {}, None
        held = sorted(found.values(), key=lambda h: (h.tier, h.name))
        tier = held[0].tier
        same = [h.name for h in held if h.tier == tier]
        problem = None
        start: str | None = same[0]
        if len(same) > 1:
            parents = {self.parent.get(h) for h in same}
            start = parents.pop() if len(parents) == 1 else None
            problem = (
                f"node {node} is a member of HyperNodes {', '.join(sorted(same))} (tier {tier}): "
                + (f"read as in {start}, their parent" if start else "read as in none of them")
            )
        out: dict[str, str] = {}
        seen: set[str] = set()
        while start is not None and start not in seen:
            seen.add(start)
            key = self.level_of_tier.get(self.hypernodes[start].tier)
            if key is not None:
                out[key] = start
            start = self.parent.get(start)
        return out, problem


def build_tree(hypernodes: Iterable[HyperNode], problems: Iterable[str] = ()) -> HyperNodeTree:
    """One tree from ``hypernodes``; ``problems``: those found while parsing, kept in front."""
    found = list(problems)
    by_name: dict[str, HyperNode] = {}
    for h in sorted(hypernodes, key=lambda h: h.name):
        by_name[h.name] = h
    # HyperNode → its HyperNode members (child name → the member that selects it)
    children: dict[str, dict[str, Member]] = {}
    for h in by_name.values():
        kids: dict[str, Member] = {}
        for m in h.members:
            if m.type != "HyperNode":
                continue
            if m.exact is not None and m.exact not in by_name:
                found.append(
                    f"HyperNode {h.name}: {m.where} names HyperNode {m.exact}, which does not "
                    "exist: not used"
                )
                continue
            for other in by_name:
                if other != h.name and m.matches(other):
                    kids.setdefault(other, m)
                elif other == h.name and m.matches(other):
                    found.append(
                        f"HyperNode {h.name}: {m.where} selects HyperNode {h.name} itself "
                        f"(a cycle {h.name} → {h.name}): not used"
                    )
        children[h.name] = kids
    for cycle_edge in _cycle_edges(children):
        parent, child = cycle_edge[0], cycle_edge[1]
        member = children[parent].pop(child)
        found.append(
            f"HyperNode {parent}: {member.where} selects HyperNode {child}, which leads back to "
            f"{parent} (a cycle {' → '.join(cycle_edge)}): not used"
        )
    parents_of: dict[str, list[str]] = {}
    for parent, kids in children.items():
        for child in kids:
            parents_of.setdefault(child, []).append(parent)
    parent_map: dict[str, str] = {}
    for child, parents in sorted(parents_of.items()):
        # its parent: the narrowest HyperNode holding it (a broad pattern a tier up holds it too)
        tier = min(by_name[p].tier for p in parents)
        narrowest = sorted(p for p in parents if by_name[p].tier == tier)
        if len(narrowest) > 1:
            found.append(
                f"HyperNode {child} is a member of HyperNodes {', '.join(narrowest)} (tier "
                f"{tier}): it is given no parent"
            )
            continue
        (parent,) = narrowest
        if by_name[parent].tier <= by_name[child].tier:
            found.append(
                f"HyperNode {parent} (tier {by_name[parent].tier}): its member HyperNode {child} "
                f"has tier {by_name[child].tier}, not narrower: not used"
            )
            continue
        parent_map[child] = parent
    tiers = sorted({h.tier for h in by_name.values()})
    if len(tiers) > len(LEVEL_KEYS):
        found.append(
            f"tiers {', '.join(map(str, tiers[len(LEVEL_KEYS) :]))} are not used: Topos has three "
            "levels above the node (leaf, spine, zone)"
        )
    named: dict[str, list[HyperNode]] = {}
    scanned: list[HyperNode] = []
    for h in by_name.values():
        nodes = [m for m in h.members if m.type == "Node"]
        for name in {m.exact for m in nodes if m.exact is not None}:
            named.setdefault(name, []).append(h)
        if any(m.exact is None for m in nodes):
            scanned.append(h)
    return HyperNodeTree(
        hypernodes=by_name,
        parent=parent_map,
        level_of_tier=dict(zip(tiers, LEVEL_KEYS, strict=False)),
        problems=tuple(found),
        _named={name: tuple(hs) for name, hs in named.items()},
        _scanned=tuple(scanned),
    )


def _cycle_edges(children: Mapping[str, Mapping[str, Member]]) -> list[tuple[str, ...]]:
    """Each cycle a depth-first walk finds, as the path around it from the HyperNode whose member
    closes it (``(c, a, b, c)``: ``c``'s member ``a``, whose member ``b``, whose member ``c``).
    That first edge is dropped and the walk goes again, until no cycle is left."""
    cycles: list[tuple[str, ...]] = []
    edges = {p: dict(kids) for p, kids in children.items()}
    while True:
        cycle = _one_cycle(edges)
        if cycle is None:
            return cycles
        last, first = cycle[-2], cycle[-1]  # the edge found last closes it: drop that one
        edges[last].pop(first)
        cycles.append((last, *cycle[:-1]))


def _one_cycle(edges: Mapping[str, Mapping[str, object]]) -> tuple[str, ...] | None:
    """A cycle as a path ``(a, b, …, a)``, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in sorted(edges):
        if state.get(root):
            continue
        path: list[str] = [root]
        stack = [iter(sorted(edges.get(root, {})))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            mark = state.get(nxt)
            if mark == 1:
                return (*path[path.index(nxt) :], nxt)
            if mark is None:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(edges.get(nxt, {}))))
    return None
