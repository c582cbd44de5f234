"""Consumable capacity (KEP-5075): a device published with ``allowMultipleAllocations`` is
allocated to several claims, each request consuming part of its ``capacity``.

The rules are those of kube-scheduler's structured allocator:

- A request's amount for a capacity is its ``capacity.requests`` entry, raised to what the
  capacity's ``requestPolicy`` accepts: to ``validRange.min`` when below it, then up to the next
  ``min + n*step``; or up to the smallest of ``validValues`` that is not less. A capacity the
  request does not name consumes the policy's ``default``, or the whole ``value`` when there is
  no default (so a claim asking nothing of a shareable GPU takes all of its memory).
- The amount then must not break the policy (above ``validRange.max``, off the step, above every
  valid value; the default is always accepted), and what every allocation consumes together must
  not exceed ``value``. A request naming a capacity the device does not have never fits it.
- An exclusive device (no ``allowMultipleAllocations``) is checked the same way against its whole
  capacity, and then taken whole; only a shareable device records what each result consumes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from common.quantity import QuantityError, parse_quantity
from coordinator.core.podspec.fields import FieldError, entry, mapping, sequence

__all__ = [
    "Capacity",
    "RequestPolicy",
    "format_quantity",
    "left_after",
    "parse_amounts",
    "parse_capacities",
    "parse_requests",
    "share",
]

Amounts = Mapping[str, Fraction]  # capacity name → quantity


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    default: Fraction | None = None
    min: Fraction | None = None  # set: the policy has a validRange
    max: Fraction | None = None
    step: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()


@dataclass(frozen=True, slots=True)
class Capacity:
    value: Fraction
    policy: RequestPolicy | None = None


def _quantity(raw: object, path: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except QuantityError as bad:
        raise FieldError(path, str(bad)) from None


def _optional(parent: Mapping[str, object], key: str, path: str) -> Fraction | None:
    raw = parent.get(key)
    return None if raw is None else _quantity(raw, f"{path}.{key}")


def _policy(raw: Mapping[str, object], path: str) -> RequestPolicy:
    rng = mapping(raw, "validRange", path)
    values = tuple(
        _quantity(v, f"{path}.validValues[{i}]")
        for i, v in enumerate(sequence(raw, "validValues", path))
    )
    policy = RequestPolicy(
        default=_optional(raw, "default", path),
        min=_optional(rng, "min", f"{path}.validRange"),
        max=_optional(rng, "max", f"{path}.validRange"),
        step=_optional(rng, "step", f"{path}.validRange"),
        valid_values=values,
    )
    if policy.step is not None and policy.step <= 0:
        raise FieldError(f"{path}.validRange.step", "must be positive")
    return policy


def parse_capacities(raw: Mapping[str, object], path: str) -> dict[str, Capacity]:
    """A device's ``capacity``, keyed by the names as written (what requests name)."""
    out: dict[str, Capacity] = {}
    for name, value in raw.items():
        p = f"{path}[{name}]"
        e = entry(value, p)
        policy = e.get("requestPolicy")
        out[name] = Capacity(
            _quantity(e.get("value"), f"{p}.value"),
            _policy(entry(policy, f"{p}.requestPolicy"), f"{p}.requestPolicy")
            if policy is not None
            else None,
        )
    return out


def parse_amounts(raw: Mapping[str, object], path: str) -> dict[str, Fraction]:
    """``{name: quantity}`` (a request's ``capacity.requests``, a result's
    ``consumedCapacity``)."""
    return {name: _quantity(value, f"{path}[{name}]") for name, value in raw.items()}


def parse_requests(raw: Mapping[str, object], path: str) -> tuple[tuple[str, Fraction], ...]:
    """A request's ``capacity.requests``, as sorted (name, amount) pairs."""
    requests = mapping(mapping(raw, "capacity", path), "requests", f"{path}.capacity")
    return tuple(sorted(parse_amounts(requests, f"{path}.capacity.requests").items()))


def _consumed(requested: Fraction | None, cap: Capacity) -> Fraction:
    policy = cap.policy
    if requested is None:
        return policy.default if policy is not None and policy.default is not None else cap.value
    if policy is None:
        return requested
    if policy.min is not None:
        if requested < policy.min:
            return policy.min
        if policy.step is None:
            return requested
        return policy.min + math.ceil((requested - policy.min) / policy.step) * policy.step
    for valid in policy.valid_values:
        if requested <= valid:
            return valid
    return requested


def _violation(amount: Fraction, policy: RequestPolicy | None) -> str:
    if policy is None or amount == policy.default:
        return ""
    if policy.min is not None:
        if policy.max is not None and amount > policy.max:
            return f"above the maximum {format_quantity(policy.max)}"
        if policy.step is not None and (amount - policy.min) % policy.step:
            return (
                f"not {format_quantity(policy.min)} plus a multiple of "
                f"{format_quantity(policy.step)}"
            )
        return ""
    if policy.valid_values and amount not in policy.valid_values:
        valid = ", ".join(format_quantity(v) for v in policy.valid_values)
        return f"above every valid value ({valid})"
    return ""


def share(
    capacity: Mapping[str, Capacity], requests: Amounts, used: Amounts
) -> dict[str, Fraction] | tuple[str, bool]:
    """What a request consumes of a device with ``capacity`` of which ``used`` is taken, or
    (why it does not fit, whether it never can — the device is too small or refuses the amount
    — rather than only not now)."""
    for name in sorted(requests):
        if name not in capacity:
            return f"has no capacity {name}", True
    out: dict[str, Fraction] = {}
    for name, cap in sorted(capacity.items()):
        asked = requests.get(name)
        amount = _consumed(asked, cap)
        bad = _violation(amount, cap.policy)
        if bad:
            shown = format_quantity(asked if asked is not None else amount)
            return f"{name} {shown} is {bad}", True
        if amount > cap.value:
            return (
                f"{name} {format_quantity(amount)} is more than it has "
                f"({format_quantity(cap.value)})",
                True,
            )
        if used.get(name, Fraction(0)) + amount > cap.value:
            return f"not {format_quantity(amount)} of {name} left", False
        out[name] = amount
    return out


def left_after(capacity: Mapping[str, Capacity], used: Amounts, taking: Amounts) -> Fraction:
    """The smallest share of any capacity left once ``taking`` is added to ``used`` (best fit
    takes the device this leaves the least of)."""
    shares = [
        (cap.value - used.get(n, Fraction(0)) - taking.get(n, Fraction(0))) / cap.value
        for n, cap in capacity.items()
        if cap.value > 0
    ]
    return min(shares, default=Fraction(0))


def format_quantity(value: Fraction) -> str:
    """A quantity as the API server writes it (``85899345920`` → ``80Gi``, ``1/2`` → ``500m``)."""
    if value.denominator == 1:
        n = int(value)
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if n and n % size == 0:
                return f"{n // size}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{math.ceil(value * 10**9)}n"
