"""CEL selectors of DeviceClasses and device requests, evaluated as Kubernetes evaluates them.

The expression sees one variable, ``device``, with ``driver``, ``attributes`` and ``capacity``
(each a map from domain to a map from name to value: ``device.attributes["gpu.nvidia.com"]
.productName``, ``device.capacity["gpu.nvidia.com"].memory``) and ``allowMultipleAllocations``.
Capacities are quantities (``quantity("40Gi")``, ``compareTo``, ``isGreaterThan``,
``isLessThan``, ``asInteger``, ``asApproximateFloat``); version attributes are semantic
versions (``semver("1.2.3")``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``major``,
``minor``, ``patch``).

The CEL language itself is ``cel-python`` (``celpy``); this module adds the Kubernetes library
functions above. Each expression is compiled once (:func:`compile_selector`); a result per
device is remembered on the device. An expression that does not parse is a
:class:`CelCompileError`; one that fails at run time on a device (a missing attribute, a type
mismatch) does not select that device, as in kube-scheduler.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

import celpy
from celpy import celtypes

from common.quantity import QuantityError, parse_quantity
from coordinator.core.dra.values import SEMVER, CelCompileError, Quantity, SemVer

__all__ = ["CelCompileError", "Quantity", "Selector", "SemVer", "compile_selector"]


def _compare(a: object, b: object) -> celtypes.IntType:
    if type(a) is not type(b) or not isinstance(a, Quantity | SemVer):
        raise TypeError(f"cannot compare {type(a).__name__} with {type(b).__name__}")
    return celtypes.IntType(0 if a == b else (-1 if a < b else 1))  # type: ignore[operator]


def _quantity(text: object) -> Quantity:
    try:
        return Quantity.parse(text)
    except QuantityError as bad:
        raise ValueError(str(bad)) from None


def _as_quantity(q: object) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError(f"{type(q).__name__} is not a quantity")
    return q


def _as_integer(q: object) -> celtypes.IntType:
    value = _as_quantity(q).value
    if value.denominator != 1:
        raise ValueError(f"{q} is not an integer")
    return celtypes.IntType(int(value))


def _version_part(index: int) -> Callable[[object], celtypes.IntType]:
    def part(v: object) -> celtypes.IntType:
        if not isinstance(v, SemVer):
            raise TypeError(f"{type(v).__name__} is not a semantic version")
        return celtypes.IntType((v.major, v.minor, v.patch)[index])

    return part


def _is_semver(text: object) -> celtypes.BoolType:
    return celtypes.BoolType(SEMVER.match(str(text)) is not None)


_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = {
    "quantity": _quantity,
    "isQuantity": lambda t: celtypes.BoolType(_quantity_ok(t)),
    "semver": SemVer.parse,
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "asInteger": _as_integer,
    "isInteger": lambda q: celtypes.BoolType(_as_quantity(q).value.denominator == 1),
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(_as_quantity(q).value)),
    "sign": lambda q: celtypes.IntType((_as_quantity(q).value > 0) - (_as_quantity(q).value < 0)),
    "add": lambda a, b: Quantity(_as_quantity(a).value + _addend(b), f"{a}+{b}"),
    "sub": lambda a, b: Quantity(_as_quantity(a).value - _addend(b), f"{a}-{b}"),
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
}


def _quantity_ok(text: object) -> bool:
    try:
        parse_quantity(str(text), allow_negative=True)
    except QuantityError:
        return False
    return True


def _addend(b: object) -> Fraction:
    return b.value if isinstance(b, Quantity) else Fraction(int(b))  # type: ignore[call-overload]


@functools.cache
def _env() -> celpy.Environment:
    """Built on the first selector compiled (its parser takes ~70 ms to build: every start of
    the coordinator would pay it, DRA in use or not)."""
    return celpy.Environment()


class Selector:
    """One compiled selector expression."""

    __slots__ = ("_program", "expression")

    def __init__(self, expression: str) -> None:
        self.expression = expression
        try:
            ast = _env().compile(expression)
        except Exception as bad:  # celpy raises its parse errors and lark's
            first = str(bad).strip().splitlines()[0] if str(bad).strip() else type(bad).__name__
            raise CelCompileError(first) from None
        self._program = _env().program(ast, functions=dict(_FUNCTIONS))

    def matches(self, device: celtypes.MapType) -> bool:
        """Whether the device (as :func:`device_value` built it) is selected; a run-time error
        (missing attribute, wrong type) selects nothing."""
        try:
            result = self._program.evaluate({"device": device})
        except Exception:  # celpy raises CELEvalError and Python errors from the functions
            return False
        return isinstance(result, celtypes.BoolType | bool) and bool(result)


_COMPILED: dict[str, Selector | CelCompileError] = {}


def compile_selector(expression: str) -> Selector:
    """The compiled expression (memoised); raises :class:`CelCompileError` when it does not
    compile (remembered too: a bad expression costs one parse)."""
    hit = _COMPILED.get(expression)
    if hit is None:
        try:
            hit = Selector(expression)
        except CelCompileError as bad:
            hit = bad
        if len(_COMPILED) > 10_000:
            _COMPILED.clear()
        _COMPILED[expression] = hit
    if isinstance(hit, CelCompileError):
        raise hit
    return hit


def device_value(
    driver: str,
    attributes: Mapping[str, Mapping[str, object]],
    capacity: Mapping[str, Mapping[str, Quantity]],
    allow_multiple: bool,
) -> celtypes.MapType:
    """The ``device`` variable of a selector."""

    def plain(value: object) -> object:
        if isinstance(value, bool):
            return celtypes.BoolType(value)
        if isinstance(value, int):
            return celtypes.IntType(value)
        if isinstance(value, str):
            return celtypes.StringType(value)
        return value

    def domains(values: Mapping[str, Mapping[str, object]]) -> celtypes.MapType:
        return celtypes.MapType(
            {
                celtypes.StringType(domain): celtypes.MapType(
                    {celtypes.StringType(k): plain(v) for k, v in names.items()}
                )
                for domain, names in values.items()
            }
        )

    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): domains(attributes),
            celtypes.StringType("capacity"): domains(capacity),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(allow_multiple),
        }
    )
