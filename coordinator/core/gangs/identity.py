"""Which gang (pod group) a pod belongs to, from any of the three vocabularies of DESIGN.md §4.

1. Topos: labels ``topos.io/gang`` (group name) and ``topos.io/gang-min`` (members that must be
   placed together), annotation ``topos.io/gang-timeout`` (``300``, ``90s``, ``5m``, ``1h30m``).
2. KubeNexus: labels ``pod-group.scheduling.kubenexus.io/name`` and ``…/min-available`` — read as
   aliases of the Topos labels, so a pod may carry either spelling (or both, if they agree).
3. scheduler-plugins: label ``scheduling.x-k8s.io/pod-group`` naming a ``PodGroup`` object
   (``scheduling.x-k8s.io/v1alpha1``) in the pod's namespace; its ``spec.minMember`` and
   ``spec.scheduleTimeoutSeconds`` apply. Until that object exists the pod waits, with a message
   saying so.

:func:`gang_of` is pure: it takes the pod as the API returns it (a dict) and the PodGroup objects
the glue has seen, and returns a :class:`GangSpec`, ``None`` for a pod in no gang, or a
:class:`GangProblem` explaining what is wrong. NeuroNetes' ``AgentPool`` gang settings
(``spec.scheduling.gangScheduling``) map onto the same spec with :func:`gang_of_agent_pool`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from common import podkeys

MAX_MIN_MEMBER: Final = 10_000
MAX_TIMEOUT_S: Final = 7 * 24 * 3600.0
DEFAULT_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True, slots=True, order=True)
class GangKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSpec:
    """A gang as one of its pods declares it."""

    key: GangKey
    min_member: int
    timeout_s: float | None = None  # None: the manager's default
    source: str  # "topos" | "kubenexus" | "podgroup" | "agentpool"


@dataclass(frozen=True, slots=True, kw_only=True)
class GangProblem:
    """Why a pod's gang cannot be used yet.

    ``waiting`` is True when nothing is wrong with the pod but something it names is missing (a
    PodGroup object not created yet): the pod stays pending and the message says why. Otherwise
    the pod's own labels are wrong and it cannot be scheduled until they are fixed.
    """

    message: str
    waiting: bool = False
    key: GangKey | None = None


_DURATION: Final = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_timeout(text: str) -> float | None:
    """``"300"``, ``"90s"``, ``"5m"``, ``"1h30m"`` → seconds; None when malformed."""
    text = text.strip()
    if not text:
        return None
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    m = _DURATION.match(text)
    if m is None or not any(m.groups()):
        return None
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def parse_min_member(value: object, *, what: str) -> int | str:
    """A member count from 1 to 10,000, or an error message naming ``what``."""
    if isinstance(value, bool):
        return f"{what}={value!r}: expected a whole number from 1 to {MAX_MIN_MEMBER}"
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,12}", value.strip()):
        n = int(value.strip())
    else:
        return f"{what}={value!r}: expected a whole number from 1 to {MAX_MIN_MEMBER}"
    if n < 1:
        return f"{what}={value!r}: a pod group needs at least 1 member"
    if n > MAX_MIN_MEMBER:
        return f"{what}={value!r}: more than {MAX_MIN_MEMBER} members is not supported"
    return n


def _timeout(value: str, *, what: str) -> float | str:
    seconds = parse_timeout(value)
    if seconds is None:
        return f"{what}={value!r}: expected seconds or a duration such as 90s, 5m, 1h30m"
    if seconds <= 0:
        return f"{what}={value!r}: the timeout must be positive"
    if seconds > MAX_TIMEOUT_S:
        return f"{what}={value!r}: longer than 7 days is not supported"
    return seconds


def _meta(pod: Mapping[str, Any]) -> tuple[str, Mapping[str, str], Mapping[str, str]]:
    meta = pod.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return "default", {}, {}
    ns = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if not isinstance(labels, Mapping):
        labels = {}
    if not isinstance(annotations, Mapping):
        annotations = {}
    return str(ns), labels, annotations


def gang_of(
    pod: Mapping[str, Any],
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> GangSpec | GangProblem | None:
    """The gang a pod declares, ``None`` for a pod in no gang, or what is wrong.

    ``podgroups`` maps ``(namespace, name)`` to scheduler-plugins ``PodGroup`` objects as dicts.
    """
    namespace, labels, annotations = _meta(pod)
    name, conflict = podkeys.lookup(podkeys.GANG, labels)
    if conflict is not None:
        return GangProblem(message=conflict.message)
    pg_name, _ = podkeys.lookup(podkeys.POD_GROUP_X_K8S, labels)

    if name is not None:
        key = GangKey(namespace, name)
        if not name:
            return GangProblem(message=f"label {podkeys.GANG.canonical} is empty")
        if pg_name is not None and pg_name != name:
            return GangProblem(
                message=f"pod names two pod groups: {podkeys.GANG.canonical}={name!r} and "
                f"{podkeys.POD_GROUP_X_K8S.canonical}={pg_name!r}",
                key=key,
            )
        source = "topos" if podkeys.GANG.canonical in labels else "kubenexus"
        min_text, conflict = podkeys.lookup(podkeys.GANG_MIN, labels)
        if conflict is not None:
            return GangProblem(message=conflict.message, key=key)
        if min_text is None:
            if pg_name is not None:
                return _from_podgroup(namespace, pg_name, podgroups, annotations)
            min_label = (
                podkeys.GANG_MIN.canonical if source == "topos" else podkeys.GANG_MIN.aliases[0]
            )
            return GangProblem(
                message=f"pod group {name!r} has no member count: add label {min_label}",
                key=key,
            )
        min_label = podkeys.GANG_MIN.canonical if source == "topos" else podkeys.GANG_MIN.aliases[0]
        n = parse_min_member(min_text, what=f"label {min_label}")
        if isinstance(n, str):
            return GangProblem(message=n, key=key)
        timeout: float | None = None
        t_text, conflict = podkeys.lookup(podkeys.GANG_TIMEOUT, annotations)
        if conflict is not None:
            return GangProblem(message=conflict.message, key=key)
        if t_text is not None:
            t = _timeout(t_text, what=f"annotation {podkeys.GANG_TIMEOUT.canonical}")
            if isinstance(t, str):
                return GangProblem(message=t, key=key)
            timeout = t
        return GangSpec(key=key, min_member=n, timeout_s=timeout, source=source)

    if pg_name is not None:
        return _from_podgroup(namespace, pg_name, podgroups, annotations)
    return None


def _from_podgroup(
    namespace: str,
    name: str,
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    annotations: Mapping[str, str],
) -> GangSpec | GangProblem:
    key = GangKey(namespace, name)
    if not name:
        return GangProblem(message=f"label {podkeys.POD_GROUP_X_K8S.canonical} is empty")
    obj = (podgroups or {}).get((namespace, name))
    if obj is None:
        return GangProblem(
            message=f"waiting for PodGroup {namespace}/{name} "
            f"(scheduling.x-k8s.io) named by label {podkeys.POD_GROUP_X_K8S.canonical}: "
            "it does not exist yet",
            waiting=True,
            key=key,
        )
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        spec = {}
    n = parse_min_member(spec.get("minMember"), what=f"PodGroup {key} spec.minMember")
    if isinstance(n, str):
        return GangProblem(message=n, key=key)
    timeout: float | None = None
    raw = spec.get("scheduleTimeoutSeconds")
    if raw is not None:
        if isinstance(raw, bool) or not isinstance(raw, int):
            return GangProblem(
                message=f"PodGroup {key} spec.scheduleTimeoutSeconds={raw!r}: expected seconds",
                key=key,
            )
        if raw <= 0:
            return GangProblem(
                message=f"PodGroup {key} spec.scheduleTimeoutSeconds={raw}: must be positive",
                key=key,
            )
        t = _timeout(str(raw), what=f"PodGroup {key} spec.scheduleTimeoutSeconds")
        if isinstance(t, str):
            return GangProblem(message=t, key=key)
        timeout = t
    t_text = annotations.get(podkeys.GANG_TIMEOUT.canonical)
    if t_text is not None and timeout is None:
        t = _timeout(t_text, what=f"annotation {podkeys.GANG_TIMEOUT.canonical}")
        if isinstance(t, str):
            return GangProblem(message=t, key=key)
        timeout = t
    return GangSpec(key=key, min_member=n, timeout_s=timeout, source="podgroup")


def gang_of_agent_pool(pool: Mapping[str, Any]) -> GangSpec | GangProblem | None:
    """The gang a NeuroNetes ``AgentPool`` asks for (``spec.scheduling.gangScheduling``).

    The pool's pods are its replicas; the glue labels them ``topos.io/gang=<pool name>`` and
    ``topos.io/gang-min=<minMembers>`` from this spec. ``None`` when gang scheduling is off.
    """
    namespace, _, _ = _meta(pool)
    meta = pool.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    spec = pool.get("spec") or {}
    scheduling = spec.get("scheduling") if isinstance(spec, Mapping) else None
    gang = scheduling.get("gangScheduling") if isinstance(scheduling, Mapping) else None
    if not isinstance(gang, Mapping) or gang.get("enabled") is not True:
        return None
    if not isinstance(name, str) or not name:
        return GangProblem(message="AgentPool has no metadata.name")
    key = GangKey(namespace, name)
    raw = gang.get("minMembers", spec.get("minReplicas"))
    n = parse_min_member(raw, what=f"AgentPool {key} gangScheduling.minMembers")
    if isinstance(n, str):
        return GangProblem(message=n, key=key)
    return GangSpec(key=key, min_member=n, source="agentpool")


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_MIN_MEMBER",
    "GangKey",
    "GangProblem",
    "GangSpec",
    "gang_of",
    "gang_of_agent_pool",
    "parse_min_member",
    "parse_timeout",
]
