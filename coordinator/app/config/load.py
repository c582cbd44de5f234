"""Reading the configuration file into the :class:`~.sections.Config` tree, once.

Every problem is one :class:`ConfigError` line naming the key's path and the file::

    unknown section 'schedulng' in /etc/topos/config.yaml — did you mean 'scheduling'?
    unknown key 'auth.openReadonly' in /etc/topos/config.yaml — did you mean 'auth.openReadOnly'?
    'limits.burst' in /etc/topos/config.yaml: expected an integer, got a string
    'leaderElection' in /etc/topos/config.yaml: leaseDurationSeconds (5.0) must exceed …
    'scheduler.namespace' in /etc/topos/config.yaml: 'Not_A_Namespace!' is not a namespace name …
    'coordinator.staleTtlSeconds' in /etc/topos/config.yaml: expected a finite number, got .inf
    config /etc/topos/config.yaml is not valid YAML: key 'packing' appears twice in one mapping …

A key with no value (``tls:`` alone) is the same as no key: its default. The ``scheduling``
section keeps its own parser (``coordinator.app.config.scheduling.load_config``, shared with the
simulator and the benchmarks); its messages are prefixed with the section and the file.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import msgspec
import yaml

from common.configdoc import first_non_finite, load_yaml, yaml_number
from coordinator.app.config import scheduling
from coordinator.app.config.sections import Config

__all__ = ["ConfigError", "load_file", "parse_config"]


class ConfigError(ValueError):
    """A configuration (file or command-line value) the coordinator cannot start with."""


def load_file(path: str | None) -> Config:
    """The tree from the YAML file at ``path`` (``None``: every default)."""
    if path is None:
        return Config()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        doc = load_yaml(text)  # a key given twice in one mapping is refused, not overwritten
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {_one_line(str(exc))}") from None
    return parse_config(doc, source=path)


def parse_config(doc: object, *, source: str = "the configuration") -> Config:
    """The tree from an already decoded document (``source`` names it in messages)."""
    if doc is None:
        return Config()
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level")
    raw = _without_empty(doc)
    non_finite = first_non_finite(raw)  # every number setting, whichever section reads it
    if non_finite is not None:
        key, value = non_finite
        raise ConfigError(
            f"'{key}' in {source}: expected a finite number, got {yaml_number(value)}"
        )
    if "kind" in raw or "apiVersion" in raw:
        # A seed's scheduler object as the whole file (a KubeSchedulerConfiguration, a
        # topology-scheduler SchedulerConfig): it is the ``scheduling`` section.
        raw = {"scheduling": raw}
    rules = raw.pop("scheduling", None)
    _check_keys(raw, msgspec.inspect.type_info(Config), (), source)
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc), source, raw)) from None
    if rules is not None and not isinstance(rules, Mapping):
        raise ConfigError(f"'scheduling' in {source}: expected a mapping")
    try:
        parsed = scheduling.load_config(rules)
    except scheduling.ConfigError as exc:
        raise ConfigError(f"'scheduling' in {source}: {exc}") from None
    return msgspec.structs.replace(config, scheduling=parsed)


def _without_empty(doc: Mapping[object, object]) -> dict[object, object]:
    return {
        k: _without_empty(v) if isinstance(v, Mapping) else v
        for k, v in doc.items()
        if v is not None
    }


def _fields(info: msgspec.inspect.Type) -> tuple[msgspec.inspect.Field, ...] | None:
    """The keys an object of this type takes (a section, or an optional one), else None."""
    if isinstance(info, msgspec.inspect.StructType | msgspec.inspect.DataclassType):
        return info.fields
    if isinstance(info, msgspec.inspect.UnionType):
        for member in info.types:
            found = _fields(member)
            if found is not None:
                return found
    return None


def _check_keys(raw: object, info: msgspec.inspect.Type, path: Sequence[str], source: str) -> None:
    fields = _fields(info)
    if fields is None or not isinstance(raw, Mapping):
        return  # a wrong type is msgspec's to report, with its path
    known = {f.encode_name: f for f in fields}
    for key, value in raw.items():
        field = known.get(key) if isinstance(key, str) else None
        if field is None:
            raise ConfigError(_unknown(path, str(key), sorted(known), source))
        _check_keys(value, field.type, (*path, key), source)


def _unknown(path: Sequence[str], key: str, known: list[str], source: str) -> str:
    what = "key" if path else "section"
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        hint = f" — did you mean '{'.'.join((*path, close[0]))}'?"
    else:
        hint = f" (expected one of: {', '.join(known)})"
    return f"unknown {what} '{'.'.join((*path, key))}' in {source}{hint}"


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "nothing",
}
_AT = re.compile(r"(?s)(.*?)(?: - at `\$\.?(.*)`)?")
_KEY_FIRST = re.compile(r"(?s)([A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*): (.*)")


def _explain(message: str, source: str, raw: object = None) -> str:
    """msgspec's ``Expected `int`, got `str` - at `$.limits.burst``` in the file's words, with
    the value written there when msgspec's words do not give it (``expected a number >= 0.01,
    got 1e-09``)."""
    match = _AT.fullmatch(message)
    problem, path = (match.group(1), match.group(2)) if match else (message, None)
    if problem.startswith("Expected "):
        problem = "e" + re.sub(r"`([^`]+)`", _words, problem[1:])
        found = _value_at(raw, path) if path else _MISSING
        if ", got " not in problem and found is not _MISSING:
            problem += f", got {found!r}"
    key = _KEY_FIRST.fullmatch(problem)
    if path and key:  # a section's own check named its key: "namespace: 'x' is not …"
        path, problem = f"{path}.{key.group(1)}", key.group(2)
    return f"'{path}' in {source}: {problem}" if path else f"{source}: {problem}"


_MISSING: Final = object()
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _value_at(raw: object, path: str) -> object:
    """What the document holds at msgspec's ``path`` (``limits.burst``, ``a.b[0]``)."""
    here = raw
    for key, index in _STEP.findall(path):
        if key and isinstance(here, Mapping) and key in here:
            here = here[key]
        elif index and isinstance(here, list) and int(index) < len(here):
            here = here[int(index)]
        else:
            return _MISSING
    return here


def _words(match: re.Match[str]) -> str:
    names = [n.strip() for n in match.group(1).split("|")]
    return " or ".join(_TYPE_WORDS.get(n, n) for n in names if n != "null" or len(names) == 1)


def _one_line(text: str) -> str:
    return " ".join(text.split())
