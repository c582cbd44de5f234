"""Taints of nodes and the tolerations of pods (``spec.tolerations``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core.podspec.fields import FieldError, entry, sequence, text

__all__ = ["Taint", "Toleration", "tolerations"]


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty with operator Exists: tolerates every taint
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty: every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def tolerations(spec: Mapping[str, object]) -> tuple[Toleration, ...]:
    out: list[Toleration] = []
    for i, item in enumerate(sequence(spec, "tolerations", "spec")):
        p = f"spec.tolerations[{i}]"
        e = entry(item, p)
        key = text(e, "key", p)
        op = text(e, "operator", p, "Equal")
        value = text(e, "value", p)
        effect = text(e, "effect", p)
        if op not in ("Equal", "Exists"):
            raise FieldError(f"{p}.operator", f"unknown operator {op!r} (expected Equal or Exists)")
        if op == "Exists" and value:
            raise FieldError(f"{p}.value", "must be empty when operator is Exists")
        if not key and op != "Exists":
            raise FieldError(f"{p}.operator", "must be Exists when key is empty")
        if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise FieldError(f"{p}.effect", f"unknown effect {effect!r}")
        out.append(Toleration(key, op, value, effect))
    return tuple(out)
