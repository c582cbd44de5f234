"""Whether a Job's pods may be moved: would Kubernetes' Job controller recreate an evicted pod
without the Job failing? Pure: a Job object (as the API server returns it) in.

What the Job controller (``pkg/controller/job``, Kubernetes 1.36) does with a pod evicted through
the Eviction API: the pod gets the ``DisruptionTarget`` condition and a deletion timestamp, and
it counts as failed (``isPodFailed``: a pod being deleted that did not succeed) — unless the
Job's ``podFailurePolicy`` has a rule that matches it first with action ``Ignore`` (then it
counts for nothing). A failure that counts adds one to the Job's failures, and the Job fails
once ``failed > backoffLimit`` (``exceedsBackoffLimit``; ``backoffLimit`` defaults to 6).
Otherwise the controller creates a replacement pod. So moving ``n`` pods of a Job costs it no
failure when a ``podFailurePolicy`` rule ignores ``DisruptionTarget`` (no rule before it could
fail the Job or the index on the evicted container's exit code), and leaves the Job running when
it has at least ``n`` retries left (``backoffLimit`` − ``status.failed`` − failures not yet
counted). With ``backoffLimitPerIndex`` failures count per index (an index may fail on its own):
only the policy makes such a Job's pods movable. A Job another controller manages
(``spec.managedBy`` other than Kubernetes' own) is not judged: what recreates its pods is not
known.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["DEFAULT_BACKOFF_LIMIT", "eviction_costs_nothing"]

DEFAULT_BACKOFF_LIMIT: Final = 6
#: ``spec.managedBy`` of a Job Kubernetes' own Job controller runs.
JOB_CONTROLLER: Final = "kubernetes.io/job-controller"
_FAILING: Final = frozenset({"FailJob", "FailIndex"})


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _ignores_disruption(policy: Mapping[str, Any]) -> bool:
    """Does the first rule an evicted pod could match say ``Ignore``?"""
    rules = policy.get("rules")
    for rule in rules if isinstance(rules, list) else ():
        rule = _mapping(rule)
        action = rule.get("action")
        conditions = rule.get("onPodConditions")
        if isinstance(conditions, list):
            if any(
                _mapping(c).get("type") == "DisruptionTarget"
                and _mapping(c).get("status", "True") == "True"
                for c in conditions
            ):
                return action == "Ignore"
        elif rule.get("onExitCodes") is not None and action in _FAILING:
            return False  # the evicted container's exit code might match it first
    return False


def _finished(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions")
    return any(
        _mapping(c).get("type") in ("Complete", "Failed") and _mapping(c).get("status") == "True"
        for c in (conditions if isinstance(conditions, list) else ())
    )


def eviction_costs_nothing(job: Mapping[str, Any], pods: int = 1) -> bool:
    """Would evicting ``pods`` of ``job``'s pods leave the Job running, each recreated by its
    controller? (The module's docstring says why.)"""
    spec = _mapping(job.get("spec"))
    status = _mapping(job.get("status"))
    if _finished(status) or spec.get("suspend") is True:
        return False
    if spec.get("managedBy", JOB_CONTROLLER) != JOB_CONTROLLER:
        return False
    if _ignores_disruption(_mapping(spec.get("podFailurePolicy"))):
        return True
    if spec.get("backoffLimitPerIndex") is not None:
        return False
    limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool):
        return False
    failed = status.get("failed", 0)
    uncounted = _mapping(status.get("uncountedTerminatedPods")).get("failed")
    failed = (failed if isinstance(failed, int) else 0) + (
        len(uncounted) if isinstance(uncounted, list) else 0
    )
    return failed + pods <= limit
