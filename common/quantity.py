"""Kubernetes resource quantities (``100m``, ``64Gi``, ``1e3``, ``0.5``), parsed exactly.

The grammar is the API server's: an optionally signed decimal number followed by a binary-SI
suffix (``Ki Mi Gi Ti Pi Ei``), a decimal-SI suffix (``n u m k M G T P E`` or none), or a decimal
exponent (``e3``, ``E-2``). Values are kept as :class:`fractions.Fraction`, so ``0.1`` plus ``0.2``
is ``0.3`` and ``100m`` is exactly one tenth; conversion to the integers the scheduler counts in
(millicores, bytes, devices) rounds *up*, as kube-scheduler does.

Bad text raises :class:`QuantityError` with the offending value in the message.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

__all__ = [
    "MAX_QUANTITY",
    "QuantityError",
    "format_bytes",
    "parse_quantity",
    "to_int",
    "to_milli",
]

# Kubernetes stores quantities as int64 (of milli-units at most); anything larger is nonsense.
MAX_QUANTITY: Final = Fraction(2**63 - 1)

_BINARY: Final[dict[str, int]] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL: Final[dict[str, Fraction]] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE: Final = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d{1,3})|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A resource quantity that is malformed, negative where that is not allowed, or too large."""


def parse_quantity(value: object, *, allow_negative: bool = False) -> Fraction:
    """Parse a quantity given as text (or a plain YAML int/float) into an exact fraction.

    >>> parse_quantity("100m")
    Fraction(1, 10)
    >>> parse_quantity("64Gi") == 64 * 2**30
    True
    """
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"quantity {value!r} is not a finite number")
        text = repr(value)
        if "e" in text or "E" in text:
            # Python renders 1e-07 etc.; Fraction reads these exactly enough for a YAML float.
            result = Fraction(value)
            return _check(result, value, allow_negative)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError(f"quantity {value!r} must be a string or a number")
    if not text or len(text) > 64:
        raise QuantityError(f"quantity {value!r} is empty or too long")
    m = _RE.match(text)
    if m is None:
        raise QuantityError(
            f"quantity {value!r} is malformed; expected a number with an optional suffix "
            "such as 500m, 2, 64Gi, 10G or 1e3"
        )
    number = Fraction(m.group("num"))
    if m.group("bin") is not None:
        result = number * _BINARY[m.group("bin")]
    elif m.group("exp") is not None:
        result = number * Fraction(10) ** int(m.group("exp")[1:])
    else:
        result = number * _DECIMAL[m.group("dec") or ""]
    return _check(result, value, allow_negative)


def _check(result: Fraction, value: object, allow_negative: bool) -> Fraction:
    if result < 0 and not allow_negative:
        raise QuantityError(f"quantity {value!r} is negative")
    if abs(result) > MAX_QUANTITY:
        raise QuantityError(f"quantity {value!r} is too large")
    return result


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def to_milli(value: Fraction) -> int:
    """Milli-units, rounded up (``0.0001`` CPU is 1 millicore, as Kubernetes rounds it)."""
    return _ceil(value * 1000)


def to_int(value: Fraction) -> int:
    """Whole units, rounded up (bytes of memory, devices)."""
    return _ceil(value)


def format_bytes(value: int) -> str:
    """A short human form of a byte count (``68719476736`` → ``64Gi``) for messages."""
    for suffix, factor in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30)):
        if value >= factor and value % factor == 0:
            return f"{value // factor}{suffix}"
    for suffix, factor in (("Mi", 2**20), ("Ki", 2**10)):
        if value >= factor and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
