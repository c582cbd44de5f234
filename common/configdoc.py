"""Configuration documents as the programs read them: YAML where a mapping may not repeat a key,
and the check that every number in a document is finite.

PyYAML keeps the last of two equal keys without a word, so ``packing: spread`` written twice (or a
section pasted twice) silently drops the first; :func:`load_yaml` refuses it, naming the key and
both lines (the YAML specification requires a mapping's keys to be unique). A merge key (``<<``)
may still be overridden: that is what it is for.

YAML spells infinity and not-a-number ``.inf`` and ``.nan``; no setting means either, so
:func:`first_non_finite` finds them anywhere in a decoded document, with the key's path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

__all__ = ["DuplicateKey", "first_non_finite", "load_yaml", "yaml_number"]

_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.YAMLError):
    """A mapping names one key twice."""

    def __init__(self, key: object, first_line: int, line: int) -> None:
        super().__init__(key, first_line, line)
        self.key, self.first_line, self.line = key, first_line, line

    def __str__(self) -> str:
        lines = (
            f"line {self.line}"
            if self.line == self.first_line
            else f"lines {self.first_line} and {self.line}"
        )
        return f"key {self.key!r} appears twice in one mapping ({lines}); keep one"


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKey(key, seen[key], line)
                seen[key] = line
            except TypeError:
                continue  # an unhashable key: the base loader reports it
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """The document in ``text`` (``yaml.safe_load``), refusing a mapping with a repeated key
    (:class:`DuplicateKey`, a ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def yaml_number(value: float) -> str:
    """``value`` as YAML writes it: ``.inf``, ``-.inf``, ``.nan`` or the number."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(value)


def first_non_finite(doc: object) -> tuple[str, float] | None:
    """The path (``section.key``, ``list[2].key``) and value of the first infinite or
    not-a-number float in ``doc``, else ``None``."""
    return next(_non_finite(doc, ""), None)


def _non_finite(doc: object, path: str) -> Iterator[tuple[str, float]]:
    if isinstance(doc, float) and not math.isfinite(doc):
        yield path, doc
    elif isinstance(doc, Mapping):
        for key, value in doc.items():
            yield from _non_finite(value, f"{path}.{key}" if path else str(key))
    elif isinstance(doc, list | tuple):
        for i, value in enumerate(doc):
            yield from _non_finite(value, f"{path}[{i}]")
