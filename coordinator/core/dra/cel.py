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
mismatch, a division by zero, a result that is not a bool) raises :class:`CelRuntimeError`
with the text cel-go gives (kube-scheduler aborts the pod's attempt with it; it never means
"not selected"). As in Kubernetes, ``device.attributes[domain]`` and ``device.capacity[domain]``
of a domain the device lacks are empty maps (``has(device.attributes["x.com"].y)`` is false,
``device.attributes["x.com"].y`` is "no such key: y").

celpy evaluates by walking the expression's tree, several Python frames per level: an
expression as deep as the API server accepts (248 nested levels, ~2,500 tree levels) is
evaluated with the interpreter's recursion limit raised for it, sized by its depth.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError

from common.quantity import QuantityError, parse_quantity
from coordinator.core.dra.values import (
    SEMVER,
    CelCompileError,
    CelRuntimeError,
    Quantity,
    SemVer,
    driver_only,
)

__all__ = [
    "CelCompileError",
    "CelRuntimeError",
    "Quantity",
    "Selector",
    "SemVer",
    "compile_selector",
]

#: resource.ParseQuantity's error, as Kubernetes' ``quantity()`` reports it
QUANTITY_FORMAT: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def _compare(a: object, b: object) -> celtypes.IntType:
    if type(a) is not type(b) or not isinstance(a, Quantity | SemVer):
        raise TypeError(f"cannot compare {type(a).__name__} with {type(b).__name__}")
    return celtypes.IntType(0 if a == b else (-1 if a < b else 1))  # type: ignore[operator]


def _quantity(text: object) -> Quantity:
    try:
        return Quantity.parse(text)
    except QuantityError:
        raise ValueError(QUANTITY_FORMAT) from None


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


def _depth(tree: lark.Tree[Any]) -> int:
    """How many levels deep the tree goes (walked without recursion)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))
    return deepest


#: Python frames celpy's evaluator takes per tree level (measured: under 5), and the frames
#: left to whoever evaluates (the interpreter's default limit).
_FRAMES_PER_LEVEL: Final = 6
_CALLER_FRAMES: Final = 1000

#: the CEL type names cel-go reports a result by, and how it says it is no bool
_TYPE_NAMES: Final[tuple[tuple[type, str], ...]] = (
    (celtypes.StringType, "string"),
    (celtypes.IntType, "int"),
    (celtypes.UintType, "uint"),
    (celtypes.DoubleType, "double"),
    (celtypes.BytesType, "bytes"),
    (celtypes.ListType, "list"),
    (celtypes.MapType, "map"),
    (Quantity, "kubernetes.Quantity"),
    (SemVer, "kubernetes.Semver"),
)
_NOT_BOOL: Final = {
    "string": "unsupported native conversion from string to 'bool'",
    "int": "unsupported type conversion from 'int' to bool",
    "uint": "unsupported type conversion from 'uint' to bool",
    "double": "type conversion error from Double to 'bool'",
    "bytes": "type conversion error from Bytes to 'bool'",
    "null_type": "type conversion error from 'null_type' to 'bool'",
    "list": "type conversion error from list to 'bool'",
    "map": "type conversion error from map to 'bool'",
    "kubernetes.Quantity": "type conversion error from 'Quantity' to 'bool'",
    "kubernetes.Semver": "type conversion error from 'Semver' to 'bool'",
}


def _not_bool(result: object) -> str:
    name = "null_type" if result is None else type(result).__name__
    for kind, cel_name in _TYPE_NAMES:
        if isinstance(result, kind):
            name = cel_name
            break
    how = _NOT_BOOL.get(name, f"unsupported type conversion from '{name}' to bool")
    return f"CEL result of type {name} could not be converted to bool: {how}"


_QUOTED: Final = re.compile(r"'(.*)'")


def _cel_go_text(bad: CELEvalError) -> str:
    """celpy's evaluation error in cel-go's words (what kube-scheduler reports)."""
    message, kind, details = (*bad.args, None, None, None)[:3]
    text = str(message)
    if kind is KeyError:  # a missing map key, or a missing member of a map
        key = details[0] if isinstance(details, tuple) and details else None
        if key is None:
            found = _QUOTED.search(text)
            key = found.group(1) if found else ""
        return f"no such key: {key}"
    if kind is ZeroDivisionError:
        modulus = (
            isinstance(details, tuple)
            and "modulo by zero" in str(details[0])
            and ("division" not in str(details[0]))
        )
        return "modulus by zero" if modulus else "division by zero"
    if kind is TypeError and text.startswith("found no matching overload"):
        return "no such overload"
    if kind is ValueError and isinstance(details, tuple) and details:
        said = str(details[0])
        return "integer overflow" if said == "overflow" else said  # else quantity()'s, …
    return text


class Selector:
    """One compiled selector expression."""

    __slots__ = ("_depth", "_program", "driver_is", "expression")

    def __init__(self, expression: str) -> None:
        self.expression = expression
        #: the driver name when the expression only compares ``device.driver`` with it
        self.driver_is = driver_only(expression)
        try:
            ast = _env().compile(expression)
        except Exception as bad:  # celpy raises its parse errors and lark's
            first = str(bad).strip().splitlines()[0] if str(bad).strip() else type(bad).__name__
            raise CelCompileError(first) from None
        self._depth = _depth(ast)
        self._program = _env().program(ast, functions=dict(_FUNCTIONS))

    def matches(self, device: celtypes.MapType) -> bool:
        """Whether the device (as :func:`device_value` built it) is selected; raises
        :class:`CelRuntimeError` when the expression fails on it."""
        need = _CALLER_FRAMES + _FRAMES_PER_LEVEL * self._depth
        limit = sys.getrecursionlimit()
        if need > limit:
            sys.setrecursionlimit(need)
        try:
            result = self._program.evaluate({"device": device})
        except CELEvalError as bad:
            raise CelRuntimeError(_cel_go_text(bad)) from None
        except RecursionError:
            raise CelRuntimeError(f"expression nested too deeply ({self._depth} levels)") from None
        except Exception as bad:  # a Python error of a library function: said, never hidden
            raise CelRuntimeError(f"{type(bad).__name__}: {bad}") from None
        finally:
            if need > limit:
                sys.setrecursionlimit(limit)
        if not isinstance(result, celtypes.BoolType | bool):
            raise CelRuntimeError(_not_bool(result))
        return bool(result)


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
        return _Domains(
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


class _Domains(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: a domain the device lacks is an empty map,
    as in Kubernetes (``newStringInterfaceMapWithDefault``); ``in`` still says it is absent."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()
