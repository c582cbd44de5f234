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
``nodes`` and ``inputs``. :data:`POLICIES` is the list the controller runs, in order; a policy
that raises is reported as a condition and the others still run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from coordinator.neuronetes.conditions import Condition
from coordinator.neuronetes.podtemplate import MODEL_ANNOTATION
from coordinator.neuronetes.pool import PoolSpec
from coordinator.neuronetes.scaling import Decision

__all__ = [
    "CLEAN_ENERGY_GATE",
    "POLICIES",
    "Policy",
    "PolicyContext",
    "PolicyEvent",
    "run_policies",
]

CLEAN_ENERGY_GATE: Final = "neuronetes.io/clean-energy-window"


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
    conditions: list[Condition] = field(default_factory=list)
    events: list[PolicyEvent] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)

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

#: The policies every reconcile runs, in order (cost, carbon and cache policies register here).
POLICIES: list[Policy] = []


def run_policies(ctx: PolicyContext, policies: Sequence[Policy] | None = None) -> PolicyContext:
    for policy in POLICIES if policies is None else policies:
        name = getattr(policy, "__name__", type(policy).__name__)
        try:
            policy(ctx)
        except Exception as exc:  # one broken policy must not stop the pool
            ctx.conditions.append(
                Condition("PolicyFailed", "True", "PolicyError", f"{name}: {exc}")
            )
    return ctx
