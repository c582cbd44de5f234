"""The part of Go's ``text/template`` that scheduler_perf's object files use, rendered as its
runner renders them (``getSpecFromTextTemplateFile`` in upstream's ``operations.go``, v1.36.3):
each file is executed with ``{"Index": i, "Count": n}`` — the object's index among the ``n`` an
op creates — and the functions of ``getTemplateFuncs``.

Read: ``{{.Index}}``, ``{{.Count}}`` and a call of one of those functions whose arguments are
``.Index``, ``.Count`` or number literals (``{{DivideInt .Index 5}}``, ``{{Mod .Index 25}}``),
with or without spaces inside the braces. Anything else — a pipeline, ``if``/``range``, a
variable, parentheses, ``{{-`` trimming — is an error naming the construct and the file, as is
a call with the wrong number of arguments or a division by zero (Go's template panics).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["FUNCTIONS", "ObjectTemplate", "TemplateError", "load_template", "render"]


class TemplateError(ValueError):
    """A template this runner cannot render; the message names the file and the construct."""


def _div(a: float, b: float) -> float:
    if b == 0:
        raise ZeroDivisionError("division by zero")
    return a / b


def _mod(a: float, b: float) -> int:
    if int(b) == 0:
        raise ZeroDivisionError("integer divide by zero")
    return int(math.fmod(int(a), int(b)))  # Go's %: the sign of the dividend


def _product(*xs: float) -> float:
    return math.prod(xs)


#: name → (function, number of arguments: None for any), as upstream's getTemplateFuncs; the
#: ``Int`` ones truncate toward zero (Go's ``int(float64)``).
FUNCTIONS: dict[str, tuple[Callable[..., float], int | None]] = {
    "AddFloat": (lambda *xs: math.fsum(xs), None),
    "AddInt": (lambda *xs: int(math.fsum(xs)), None),
    "DivideFloat": (_div, 2),
    "DivideInt": (lambda a, b: int(_div(a, b)), 2),
    "Mod": (_mod, 2),
    "MultiplyFloat": (_product, None),
    "MultiplyInt": (lambda *xs: int(_product(*xs)), None),
    "SubtractFloat": (lambda a, b: a - b, 2),
    "SubtractInt": (lambda a, b: int(a - b), 2),
}

_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _format(value: float) -> str:
    """As Go's template prints an int or a float64 (``%v``): ``3``, ``2.5``."""
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    return repr(value)


def _argument(word: str, env: dict[str, int], where: str) -> float:
    if word.startswith("."):
        if word[1:] not in env:
            raise TemplateError(f"{where}: {word!r} is not a field here (.Index, .Count)")
        return env[word[1:]]
    if _NUMBER.fullmatch(word):
        number = float(word)
        return int(number) if number.is_integer() and "." not in word else number
    raise TemplateError(f"{where}: argument {word!r} is not .Index, .Count or a number")


def _action(text: str, env: dict[str, int], where: str) -> str:
    inner = text.strip()
    if text.startswith("-") or text.endswith("-") or any(c in inner for c in '|()$"`'):
        raise TemplateError(
            f"{where}: {{{{{text}}}}} is not read by this runner (only .Index, "
            f".Count and {', '.join(FUNCTIONS)} over them)"
        )
    words = inner.split()
    if not words:
        raise TemplateError(f"{where}: an empty action {{{{{text}}}}}")
    head, args = words[0], words[1:]
    if head.startswith("."):
        if args:
            raise TemplateError(f"{where}: {{{{{text}}}}}: a field takes no arguments")
        return _format(_argument(head, env, where))
    found = FUNCTIONS.get(head)
    if found is None:
        raise TemplateError(
            f"{where}: {{{{{text}}}}}: {head!r} is not a function this runner reads "
            f"({', '.join(FUNCTIONS)})"
        )
    function, arity = found
    if arity is not None and len(args) != arity:
        raise TemplateError(f"{where}: {{{{{text}}}}}: {head} takes {arity} arguments")
    try:
        return _format(function(*(_argument(a, env, where) for a in args)))
    except ZeroDivisionError as exc:
        raise TemplateError(f"{where}: {{{{{text}}}}}: {exc}") from None


def render(text: str, index: int, count: int, where: str = "template") -> str:
    """``text`` with every action replaced, for object ``index`` of ``count``."""
    env = {"Index": index, "Count": count}
    return _ACTION.sub(lambda m: _action(m.group(1), env, where), text)


@dataclass(frozen=True, slots=True)
class ObjectTemplate:
    """One object file: loaded once, rendered per object when it is templated."""

    path: Path
    text: str
    templated: bool
    _plain: dict[str, Any] | None = field(default=None, compare=False)

    def render(self, index: int = 0, count: int = 1) -> dict[str, Any]:
        """The object for ``index`` of ``count`` (a file without actions: always the same)."""
        if self._plain is not None:
            return self._plain
        return _object(render(self.text, index, count, str(self.path)), self.path)


def _object(text: str, path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    if not isinstance(loaded, dict):
        raise TemplateError(f"{path}: expected one object")
    return loaded


def load_template(path: Path) -> ObjectTemplate:
    """Read ``path``; a templated file is rendered once here (index 0 of 1), so that a construct
    this runner does not read is refused before anything runs."""
    if not path.is_file():
        raise TemplateError(f"{path}: no such template")
    text = path.read_text()
    if "{{" not in text:
        return ObjectTemplate(path, text, False, _object(text, path))
    template = ObjectTemplate(path, text, True)
    template.render(0, 1)
    return template
