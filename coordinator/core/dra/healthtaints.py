"""Health verdicts as DRA device taints: which ``DeviceTaintRule`` objects Topos keeps
(docs/health.md, "Published as DRA device taints").

An unhealthy GPU (``healthy: false``: lost, a fatal XID, an ``unhealthy`` verdict of the agent's
monitor) that a node publishes as a DRA device — a device reachable from the node whose ``uuid``
attribute is the GPU's, or whose ``parentUUID`` is (its MIG devices) — gets one rule selecting
exactly that device (driver, pool, device) with the taint ``topos.io/gpu-unhealthy=<reason>``
and the configured effect. Rules Topos owns carry ``app.kubernetes.io/managed-by: topos``; only
those are ever changed or deleted (:func:`plan`), so an operator's or a driver's rules are left
alone. Everything here is pure: the caller reads the inventory and the watched objects and does
the writes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from common.labels import is_dns1123_subdomain
from common.model import Gpu
from coordinator.core.dra.model import DeviceId
from coordinator.core.dra.objects import DeviceTaintRule, parse_device_taint_rule
from coordinator.core.dra.state import DraState
from coordinator.core.podspec.tolerations import Taint

__all__ = [
    "EFFECTS",
    "MANAGED_BY",
    "OWNER",
    "TAINT_KEY",
    "RulePlan",
    "UnhealthyGpu",
    "owned",
    "plan",
    "rule_name",
    "rule_object",
    "short_reason",
    "wanted_taints",
]

TAINT_KEY: Final = "topos.io/gpu-unhealthy"
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
OWNER: Final = "topos"
#: The effects a DeviceTaintRule may carry (``None``: informational, keeps nothing away).
EFFECTS: Final = ("NoSchedule", "NoExecute", "None")
API_VERSION: Final = "resource.k8s.io/v1beta2"

_REASONS: Final = (  # (pattern in the agent's words, short reason), first match wins
    (re.compile(r"\bXID (\d+)", re.I), "xid-{0}"),
    (re.compile(r"GPU_IS_LOST|GPU lost|\blost\b", re.I), "gpu-lost"),
    (re.compile(r"row remapping failed", re.I), "row-remap-failed"),
    (re.compile(r"uncorrected ECC|double-bit ECC", re.I), "uncorrected-ecc"),
    (re.compile(r"no handle", re.I), "no-nvml-handle"),
)


@dataclass(frozen=True, slots=True)
class UnhealthyGpu:
    """One GPU the inventory holds unhealthy, with the node that reports it."""

    node: str
    uuid: str
    reason: str  # short: a label value (:func:`short_reason`)
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)  # the node's


def short_reason(gpu: Gpu) -> str:
    """The taint's value: the agent's reason in a word a label value may hold
    (``xid-79``, ``gpu-lost``, ``row-remap-failed``, ``uncorrected-ecc``, ``no-nvml-handle``),
    else ``unhealthy``."""
    health = gpu.health
    words = " ".join(filter(None, (gpu.health_reason, *(health.reasons if health else ()))))
    for pattern, reason in _REASONS:
        if m := pattern.search(words):
            return reason.format(*m.groups())
    return "unhealthy"


def wanted_taints(
    state: DraState, unhealthy: Iterable[UnhealthyGpu], effect: str
) -> dict[DeviceId, Taint]:
    """Each DRA device that stands for an unhealthy GPU, with the taint it should carry."""
    out: dict[DeviceId, Taint] = {}
    if state.empty:
        return out
    by_node: dict[str, list[UnhealthyGpu]] = {}
    for gpu in unhealthy:
        by_node.setdefault(gpu.node, []).append(gpu)
    for node, gpus in sorted(by_node.items()):
        reason = {g.uuid: g.reason for g in gpus}
        for device in state.devices_on(node, gpus[0].labels):
            uuid = device.attribute("uuid")
            if uuid not in reason:
                uuid = device.attribute("parentUUID")
            if isinstance(uuid, str) and uuid in reason:
                out[device.id] = Taint(TAINT_KEY, reason[uuid], effect)
    return out


def owned(obj: Mapping[str, Any]) -> bool:
    """Does Topos own this DeviceTaintRule (its ``managed-by`` label)?"""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY) == OWNER)


def rule_name(device: DeviceId) -> str:
    """``topos-gpu-unhealthy.<pool>.<device>`` (device names are DNS labels, so no two devices
    of one driver share a name); a hash where that is no object name (a pool with ``/``, too
    long). Another driver's device of the same pool and name gets the hash form too."""
    readable = f"topos-gpu-unhealthy.{device.pool}.{device.device}"
    digest = hashlib.sha256(str(device).encode()).hexdigest()[:16]
    if device.driver == "gpu.nvidia.com" and is_dns1123_subdomain(readable):
        return readable
    return f"topos-gpu-unhealthy.{digest}"


def rule_object(device: DeviceId, taint: Taint) -> dict[str, Any]:
    """The DeviceTaintRule Topos writes for ``device``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name(device), "labels": {MANAGED_BY: OWNER}},
        "spec": {
            "deviceSelector": {
                "driver": device.driver,
                "pool": device.pool,
                "device": device.device,
            },
            "taint": {"key": taint.key, "value": taint.value, "effect": taint.effect},
        },
    }


@dataclass(frozen=True, slots=True)
class RulePlan:
    """What to write so that Topos's rules are the wanted ones."""

    create: tuple[dict[str, Any], ...] = ()  # whole objects
    update: tuple[dict[str, Any], ...] = ()  # whole objects, under an existing rule's name
    delete: tuple[str, ...] = ()  # rule names

    def __bool__(self) -> bool:
        return bool(self.create or self.update or self.delete)


def _exact(rule: DeviceTaintRule) -> DeviceId | None:
    """The one device a rule selects by driver, pool and device (``None``: not that shape)."""
    if rule.selects and rule.driver and rule.pool and rule.device:
        return DeviceId(rule.driver, rule.pool, rule.device)
    return None


def plan(wanted: Mapping[DeviceId, Taint], existing: Iterable[Mapping[str, Any]]) -> RulePlan:
    """From the wanted taints and the DeviceTaintRules there are now (all of them: rules Topos
    does not own are never in the plan), the creates, updates and deletes. A Topos rule whose
    device is no longer wanted, that does not parse, or that selects anything but one device is
    deleted; of two Topos rules for one device the second is; one whose taint differs is
    updated in place."""
    have: dict[DeviceId, tuple[str, Taint]] = {}
    delete: list[str] = []
    for obj in sorted(existing, key=lambda o: str((o.get("metadata") or {}).get("name"))):
        if not owned(obj):
            continue
        name = str(obj["metadata"].get("name") or "")
        rule = parse_device_taint_rule(obj)
        device = _exact(rule) if isinstance(rule, DeviceTaintRule) else None
        if device is None or device not in wanted or device in have:
            delete.append(name)
            continue
        assert isinstance(rule, DeviceTaintRule)
        have[device] = (name, rule.taint)
    create: list[dict[str, Any]] = []
    update: list[dict[str, Any]] = []
    for device, taint in sorted(wanted.items()):
        if device not in have:
            create.append(rule_object(device, taint))
            continue
        name, current = have[device]
        if current != taint:
            obj = rule_object(device, taint)
            obj["metadata"]["name"] = name
            update.append(obj)
    return RulePlan(tuple(create), tuple(update), tuple(delete))
