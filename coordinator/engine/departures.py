"""Which waiting pods a bound pod's departure (deleted, ended, moved away) may help: kube-
scheduler's queueing hints on a Pod delete, one per plugin that refused the pod. A pod assumed
onto a node whose room is given back (its bind failed, or it was deleted before its bind was
seen) leaves the same way, as in kube-scheduler (``handleAssumedPodDeletion`` and
``handleBindingCycleError`` send the assumed pod through the same hints): its
:class:`~coordinator.core.snapshot.podinfo.PodInfo` stands for it.

A waiting pod goes back if one of the plugins that refused it on its last attempt
(``QueuedPod.refused_by``, those whose refusal a change of pods may lift) may be helped by the
pod that left:

- **NodeResourcesFit** — the pod that left held a resource the waiting pod asks for, or the
  waiting pod was refused for the pod count somewhere ("Too many pods": any pod's place helps;
  kube's ``isSchedulableAfterPodEvent`` wakes it for any bound pod);
- **NodePorts** — it held a host port the waiting pod wants;
- **NodeVolumeLimits** — it used volumes (claims, generic ephemeral or inline in-tree volumes);
- **VolumeRestrictions** — it used a claim the waiting pod names, in the waiting pod's namespace
  (a ``ReadWriteOncePod`` claim is free again);
- **InterPodAffinity** — it matched one of the waiting pod's required anti-affinity terms, or
  the waiting pod matched one of its own (kube's ``isSchedulableAfterPodChange`` on a delete,
  with kubernetes#139161's fix: one matching anti-affinity term refuses a node, so one is enough;
  v1.36.3 still asks for every term, leaving a pod refused by one of two terms to the periodic
  flush). A departure never helps affinity (it can only take a matching pod away). A term with
  a namespace selector may match any namespace (its labels are not known here);
- **PodTopologySpread** — it was in the waiting pod's namespace and a spread constraint's
  selector matched it (domains' counts changed);
- any other plugin (GPU topology, MIG, shares, gangs, a user's): whenever the departure gained
  room on its node — the safe default, so a pod that holds GPUs or devices leaving still wakes
  every pod those refused.

A pod whose refusers are not known (``refused_by`` ``None``: a gang member, a failure not made by
a framework cycle) goes back on any departure that gained room, and one with affinity or spread
terms on any departure. Node-local hints (room, ports, volume counts, unknown plugins) count a
departure only if it gained room: a pod leaving a cordoned node frees nothing for anyone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from coordinator.core.podspec.affinity import AffinityTerm
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod
from coordinator.core.snapshot.podinfo import PodInfo, bound_affinity_terms
from coordinator.core.status import Reason
from coordinator.inventory.state import BoundPod

__all__ = ["Departure", "helped_by_departures", "term_may_select"]


Left = BoundPod | PodInfo
"""The pod that left: as the inventory held it bound, or as it was assumed."""


@dataclass(frozen=True)
class Departure:
    """A bound (or assumed) pod that left its node; ``gained``: its node can take more than
    before."""

    pod: Left
    gained: bool

    @functools.cached_property
    def shunned(self) -> tuple[AffinityTerm, ...]:
        """The pod's own required anti-affinity terms (read once, when a hint first asks)."""
        if isinstance(self.pod, PodInfo):
            return self.pod.anti_affinity
        return bound_affinity_terms(self.pod, "podAntiAffinity")[0]


def _fit(pod: QueuedPod, req: PodRequest, gone: Departure) -> bool:
    left = gone.pod
    if Reason.TOO_MANY_PODS in pod.last_message:
        return True  # any pod's place
    return any(n > 0 and req.requests.get(k, 0) > 0 for k, n in left.requests.items())


def _ports(pod: QueuedPod, req: PodRequest, gone: Departure) -> bool:
    return any(w.conflicts(h) for h in gone.pod.host_ports for w in req.host_ports)


def _volume_count(pod: QueuedPod, req: PodRequest, gone: Departure) -> bool:
    return bool(gone.pod.volume_claims or gone.pod.inline_volumes)


def term_may_select(term: AffinityTerm, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether ``term`` may select a pod in ``namespace`` with ``labels`` (the namespace's own
    labels are not known here: a term with a namespace selector may)."""
    selector = term.namespace_selector
    if selector is not None and not selector.is_empty:
        return term.selector is not None and term.selector.matches(labels)
    return term.matches_pod(namespace, labels, None)


def _any_may_select(
    terms: Sequence[AffinityTerm], namespace: str, labels: Mapping[str, str]
) -> bool:
    return any(term_may_select(t, namespace, labels) for t in terms)


def _terms(pod: QueuedPod, req: PodRequest, gone: Departure) -> bool:
    left = gone.pod
    if _any_may_select(req.pod_anti_affinity, left.namespace, left.labels):
        return True
    return _any_may_select(gone.shunned, req.namespace, req.labels)


def _spread(pod: QueuedPod, req: PodRequest, gone: Departure) -> bool:
    left = gone.pod
    return left.namespace == req.namespace and any(
        c.selector is not None and c.selector.matches(left.labels) for c in req.spread
    )


def _shared_claim(pod: QueuedPod, req: PodRequest, gone: Departure) -> bool:
    left = gone.pod
    if left.namespace != req.namespace or not left.volume_claims:
        return False
    return any(c.name in left.volume_claims for c in req.volume_claims)


Hint = Callable[[QueuedPod, PodRequest, Departure], bool]

#: plugin → (its hint, whether the departure must have gained room on its node)
_HINTS: Mapping[str, tuple[Hint, bool]] = {
    "NodeResourcesFit": (_fit, True),
    "NodePorts": (_ports, True),
    "NodeVolumeLimits": (_volume_count, True),
    "VolumeRestrictions": (_shared_claim, False),
    "InterPodAffinity": (_terms, False),
    "PodTopologySpread": (_spread, False),
}


def _sensitive(req: PodRequest) -> bool:
    return bool(req.has_affinity_terms or req.spread)


def helped_by_departures(departures: Sequence[Departure]) -> Callable[[QueuedPod], bool]:
    """The waiting pods one of ``departures`` may help (see the module docstring)."""
    gained = any(d.gained for d in departures)

    def helped(pod: QueuedPod) -> bool:
        req = pod.request
        refusers = pod.refused_by
        if refusers is None or not isinstance(req, PodRequest) or req.gang is not None:
            if gained and pod.waits_for == "any":
                return True
            return isinstance(req, PodRequest) and _sensitive(req)
        for name in refusers:
            hint, local = _HINTS.get(name, (None, True))
            for d in departures:
                if local and not d.gained:
                    continue
                if hint is None or hint(pod, req, d):
                    return True
        return False

    return helped
