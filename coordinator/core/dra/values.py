"""The values DRA selectors compare — quantities and semantic versions — and the errors of a
selector that does not compile or fails on a device: what the DRA objects and the allocator need
without loading the CEL language (``celpy`` and its parser: ~20 ms of every coordinator start),
which :mod:`.cel` loads when a selector is first compiled."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import total_ordering
from typing import Final

from common.quantity import parse_quantity

__all__ = [
    "CelCompileError",
    "CelRuntimeError",
    "Quantity",
    "SelectorError",
    "SemVer",
    "driver_only",
]

#: ``device.driver == "<name>"`` (either quote, no escapes): the commonest selector, answered
#: from the device's id without building its CEL value or loading CEL at all (the same answer:
#: ``driver`` is always a string, compared exactly; and such an expression always compiles)
_DRIVER_IS: Final = re.compile(r"""\s*device\.driver\s*==\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*""")


def driver_only(expression: str) -> str | None:
    """The driver name when ``expression`` only compares ``device.driver`` with it."""
    simple = _DRIVER_IS.fullmatch(expression)
    if simple is None:
        return None
    return simple.group(1) if simple.group(1) is not None else simple.group(2)


class SelectorError(ValueError):
    """A selector expression that cannot select: it does not compile, or fails on a device."""


class CelCompileError(SelectorError):
    """A selector expression that does not compile."""


class CelRuntimeError(SelectorError):
    """A selector that fails on a device (a missing attribute, a type mismatch, a result that
    is not a bool): ``error`` is cel-go's text for it, ``index`` which of a list of selectors
    failed. kube-scheduler aborts the pod's attempt with it; it never means "not selected"."""

    def __init__(self, error: str, index: int = 0) -> None:
        super().__init__(error)
        self.error = error
        self.index = index


@total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """A Kubernetes resource quantity inside CEL."""

    value: Fraction
    text: str

    @classmethod
    def parse(cls, text: object) -> Quantity:
        return cls(parse_quantity(str(text), allow_negative=True), str(text))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)


SEMVER: Final = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


@total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class SemVer:
    """A semantic version inside CEL (pre-releases sort before the release)."""

    major: int
    minor: int
    patch: int
    pre: str = ""

    @classmethod
    def parse(cls, text: object) -> SemVer:
        m = SEMVER.match(str(text))
        if m is None:
            raise ValueError(f"{text!r} is not a semantic version")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) or "")

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        pre = tuple((0, int(p)) if p.isdigit() else (1, p) for p in self.pre.split(".") if self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SemVer) and self._key() == other._key()

    def __lt__(self, other: SemVer) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())
