"""Typed reading of YAML mappings into frozen dataclasses, with errors that name the field."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A configuration value that is missing, misspelt, mistyped or out of range."""


class Section:
    """A YAML mapping at a dotted `path`; reading a key consumes it, `finish` rejects leftovers."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(data).__name__}")
        self.data, self.path, self._read = data, path, set()

    def where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def section(self, key: str) -> Section:
        self._read.add(key)
        return Section(self.data.get(key), self.where(key))

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str) -> Any:
        """The value at `key` as YAML gave it (None when absent), for the caller to check."""
        self._read.add(key)
        return self.data.get(key)

    def value(self, key: str, kind: Any, default: Any = dataclasses.MISSING) -> Any:
        self._read.add(key)
        if key not in self.data:
            if default is dataclasses.MISSING:
                raise ConfigError(f"{self.where(key)}: required")
            return default
        return coerce(self.data[key], kind, self.where(key))

    def fill(self, cls: type, **fixed: Any) -> Any:
        """Build dataclass `cls` from this section: its fields by name, `fixed` given by the caller."""
        hints = typing.get_type_hints(cls)
        kwargs = dict(fixed)
        for field in dataclasses.fields(cls):
            if field.name in fixed or not field.init:
                continue
            default = field.default if field.default is not dataclasses.MISSING else dataclasses.MISSING
            if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
                default = field.default_factory()
            if self.has(field.name) or default is dataclasses.MISSING:
                kwargs[field.name] = self.value(field.name, hints[field.name])
            else:
                self._read.add(field.name)
        self.finish()
        return build(cls, self.path, **kwargs)

    def finish(self) -> None:
        unknown = [k for k in self.data if k not in self._read]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), sorted(map(str, self._read)), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(sorted(self._read))}"
            raise ConfigError(f"{self.where(str(key))}: unknown field{hint}")


def build(cls: type, path: str, **kwargs: Any) -> Any:
    """Construct `cls`, turning its validation ValueError into a ConfigError at `path`."""
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def coerce(value: Any, kind: Any, where: str) -> Any:
    """Check `value` against a simple type hint (int, float, bool, str, Optional, Path)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        kind = next(k for k in options if k is not type(None))
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in (bool, str) and isinstance(value, kind):
        return value
    if isinstance(kind, type) and kind not in (int, float, bool, str) and isinstance(value, str):
        return kind(value)
    raise ConfigError(f"{where}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
