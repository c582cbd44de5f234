"""Typed reads of a decoded Kubernetes object, and of Topos keys under any of their spellings.

Every reader raises :class:`FieldError` naming the field path; :func:`~coordinator.core.podspec.
parse.parse_pod` turns it into a :class:`~coordinator.core.podspec.parse.PodSpecError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from common import podkeys

__all__ = [
    "FieldError",
    "entry",
    "integer",
    "key_choice",
    "key_path",
    "key_value",
    "mapping",
    "sequence",
    "str_map",
    "text",
    "written_path",
]


class FieldError(Exception):
    """A field of a pod that cannot be used as written: its path and what is wrong with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def mapping(parent: Mapping[str, object], key: str, path: str) -> Mapping[str, object]:
    value = parent.get(key)
    if type(value) is dict:  # as decoded (an ABC's isinstance costs more than the rest)
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FieldError(f"{path}.{key}", "must be a mapping")
    return value


def sequence(parent: Mapping[str, object], key: str, path: str) -> Sequence[object]:
    value = parent.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise FieldError(f"{path}.{key}", "must be a list")
    return value


def text(parent: Mapping[str, object], key: str, path: str, default: str = "") -> str:
    value = parent.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise FieldError(f"{path}.{key}", "must be a string")
    return value


def integer(parent: Mapping[str, object], key: str, path: str) -> int | None:
    value = parent.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"{path}.{key}", "must be an integer")
    return value


def entry(item: object, path: str) -> Mapping[str, object]:
    if not isinstance(item, Mapping):
        raise FieldError(path, "must be a mapping")
    return item


def str_map(parent: Mapping[str, object], key: str, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in mapping(parent, key, path).items():
        if not isinstance(v, str):
            raise FieldError(f"{path}.{key}.{k}", "must be a string")
        out[str(k)] = v
    return out


def key_path(key: podkeys.Key, spelling: str | None = None) -> str:
    """The field path of a Topos key: ``metadata.labels[topos.io/gang-min]``."""
    return f"metadata.{key.where}s[{spelling or key.canonical}]"


def written_path(key: podkeys.Key, values: Mapping[str, str]) -> str:
    """The field path of ``key`` as the pod spells it (an alias when the pod used one)."""
    return key_path(key, podkeys.spelling(key, values))


def key_value(key: podkeys.Key, values: Mapping[str, str]) -> str | None:
    """The value of ``key`` under any spelling; two spellings that disagree are an error."""
    value, conflict = podkeys.lookup(key, values)
    if conflict is not None:
        raise FieldError(written_path(key, values), conflict.message)
    return value


def key_choice(key: podkeys.Key, values: Mapping[str, str], allowed: Sequence[str]) -> str | None:
    value = key_value(key, values)
    if value is None:
        return None
    if value not in allowed:
        raise FieldError(
            written_path(key, values), f"unknown value {value!r} (expected {' | '.join(allowed)})"
        )
    return value
