"""The per-pool policy step: functions that run on every reconcile of a pool, after its pod
template is made from the spec and before pods are created from it.

A :data:`Policy` receives a :class:`PolicyContext` and may change ``template`` (switch the model
for a ``fallbackModel`` with :meth:`~PolicyContext.set_model`, add or drop the scheduling gate
``neuronetes.io/clean-energy-window`` with :meth:`~PolicyContext.set_gate`, add node affinity for
spot capacity with :meth:`~PolicyContext.prefer_nodes`), add status ``conditions`` and
``events``, and record what it decided under ``status`` (written as the pool's
``status.policy``). A changed template replaces the pool's pods (its hash changes); a dropped
scheduling gate is lifted from pods in place.
Policies are pure; what they need from outside (node labels, prices, carbon intensity) comes in
``nodes``, ``node_facts`` and ``inputs``; what a policy keeps between reconciles of one pool
lives in ``memory``. Besides the template a policy may ask the controller to delete pods whose
node vanished (``evict``), to cap how many of the pods it creates now may land on spot nodes
(``spot_slots``; the rest get required on-demand node affinity at creation, which does not
change the template's hash) and to scale up (``scale_to``). The guide's policies are
:data:`coordinator.neuronetes.decide.policy.GUIDE_POLICIES`, the controller's default; a
policy that raises is reported as a condition and the others still run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.core.podspec.poolkeys import CLEAN_ENERGY_GATE
from coordinator.core.podspec.tolerations import Taint
from coordinator.neuronetes.decide.conditions import Condition
from coordinator.neuronetes.decide.podtemplate import MODEL_ANNOTATION
from coordinator.neuronetes.decide.pool import PoolSpec
from coordinator.neuronetes.decide.replicas import OwnedPod
from coordinator.neuronetes.decide.scaling import Decision

__all__ = [
    "CLEAN_ENERGY_GATE",
    "NodeFacts",
    "Policy",
    "PolicyContext",
    "PolicyEvent",
    "enabled",
    "run_policies",
]


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the policies know of one node: its labels, its GPUs, the models its cache holds
    (the inventory's ``topos.io/models``), its taints and its free extended resources
    (``nvidia.com/gpu``: whole GPUs nobody holds; ``None``: not known)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 0
    models: frozenset[str] = frozenset()
    taints: tuple[Taint, ...] = ()
    free: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class PolicyEvent:
    reason: str
    message: str
    warning: bool = False


@dataclass(slots=True)
class PolicyContext:
    pool: PoolSpec
    raw: Mapping[str, Any]
    """The AgentPool as the API server returned it."""
    template: dict[str, Any]
    """The pod template; a policy edits it in place."""
    now: float
    """Wall-clock seconds (Unix time)."""
    nodes: Sequence[Mapping[str, str]] = ()
    """The labels of every node the coordinator knows."""
    decision: Decision | None = None
    """The autoscaler's decision this reconcile (None: no signals yet)."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """What the coordinator's configuration gives the policies (price table, carbon source)."""
    node_facts: Mapping[str, NodeFacts] = field(default_factory=dict)
    """Every node the coordinator knows, by name (empty: not known yet)."""
    pods: Sequence[OwnedPod] = ()
    """The pool's pods as the controller sees them."""
    memory: dict[str, Any] = field(default_factory=dict)
    """The pool's policy memory, kept between reconciles (not written anywhere)."""
    conditions: list[Condition] = field(default_factory=list)
    events: list[PolicyEvent] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    evict: set[str] = field(default_factory=set)
    """Names of the pool's pods to delete (and replace) now."""
    spot_slots: int | None = None
    """How many of the pods created now may go to spot nodes (None: no cap)."""
    scale_to: int | None = None
    """Replicas a policy asks for (only ever more than now)."""

    def block(self, key: str) -> Mapping[str, Any] | None:
        """The pool's ``spec.scheduling.<key>`` block, or ``None`` (see :func:`enabled`)."""
        return enabled(self.pool.scheduling.get(key))

    def gates(self) -> list[str]:
        return [
            str(g.get("name")) for g in self.template.get("spec", {}).get("schedulingGates") or ()
        ]

    def set_model(self, model: str) -> None:
        """Serve ``model`` instead (a ``fallbackModel``): the ``neuronetes.io/model`` annotation
        and every container's ``--model`` argument."""
        meta = self.template.setdefault("metadata", {})
        meta.setdefault("annotations", {})[MODEL_ANNOTATION] = model
        for container in self.template.get("spec", {}).get("containers") or ():
            args = container.get("args") or []
            for i in range(len(args) - 1):
                if args[i] == "--model":
                    args[i + 1] = model

    def prefer_nodes(
        self, expression: Mapping[str, Any], weight: int = 50, *, required: bool = False
    ) -> None:
        """Add a node affinity term (``{"key", "operator", "values"}``): required (ANDed into
        every required term) or preferred with ``weight`` (1–100)."""
        affinity = self.template.setdefault("spec", {}).setdefault("affinity", {})
        node = affinity.setdefault("nodeAffinity", {})
        if required:
            block = node.setdefault(
                "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
            )
            terms = block.setdefault("nodeSelectorTerms", [])
            if not terms:
                terms.append({"matchExpressions": []})
            for term in terms:
                term.setdefault("matchExpressions", []).append(dict(expression))
        else:
            node.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
                {"weight": weight, "preference": {"matchExpressions": [dict(expression)]}}
            )

    def set_gate(self, name: str, held: bool) -> None:
        """Hold the pool's new pods with scheduling gate ``name`` (or stop holding them)."""
        spec = self.template.setdefault("spec", {})
        gates = [g for g in spec.get("schedulingGates") or () if g.get("name") != name]
        if held:
            gates.append({"name": name})
        if gates:
            spec["schedulingGates"] = gates
        else:
            spec.pop("schedulingGates", None)


Policy = Callable[[PolicyContext], None]


def enabled(block: object) -> Mapping[str, Any] | None:
    """A policy's block; ``None`` when absent, not an object, or ``enabled: false`` (the policy
    then does nothing)."""
    if not isinstance(block, Mapping) or block.get("enabled", True) is False:
        return None
    return block


def run_policies(ctx: PolicyContext, policies: Sequence[Policy]) -> PolicyContext:
    for policy in policies:
        name = getattr(policy, "__name__", type(policy).__name__)
        try:
            policy(ctx)
        except Exception as exc:  # one broken policy must not stop the pool
            ctx.conditions.append(
                Condition("PolicyFailed", "True", "PolicyError", f"{name}: {exc}")
            )
    return ctx
