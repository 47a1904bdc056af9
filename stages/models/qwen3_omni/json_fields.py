"""Typed reads of one section of a config.json whose errors name the field by its dotted path."""

from __future__ import annotations

from typing import Any

REQUIRED: Any = object()  # the default of a field that must be present


class JsonSection:
    """The dict at `path` (dotted; "" for the top level) of the file `where`. Every read raises ValueError
    "<where>: <path>.<name> is missing" or "... must be ..., got ..." for a field it cannot take."""

    def __init__(self, data: dict, path: str = "", where: str = "config.json") -> None:
        self.data, self.path, self.where = data, path, where

    def dotted(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, problem: str) -> ValueError:
        return ValueError(f"{self.where}: {self.dotted(name)} {problem}")

    def section(self, name: str) -> JsonSection:
        return JsonSection(self._value(name, REQUIRED, dict, "an object"), self.dotted(name), self.where)

    def optional_section(self, name: str) -> JsonSection:
        """The section at `name`, or an empty one where it is absent or null."""
        return JsonSection(self._value(name, {}, dict, "an object") or {}, self.dotted(name), self.where)

    def first_present(self, *names: str) -> str:
        """The first of `names` the section has (aliases of one field); the first name when none is."""
        return next((name for name in names if self.data.get(name) is not None), names[0])

    def integer(self, name: str, default: Any = REQUIRED, minimum: int | None = 1) -> int:
        value = self._value(name, default, int, "an integer")
        if minimum is not None and value is not None and value < minimum:
            raise self.error(name, f"must be at least {minimum}, got {value!r}")
        return value

    def number(self, name: str, default: Any = REQUIRED) -> float:
        value = self._value(name, default, (int, float), "a number")
        if not value > 0:
            raise self.error(name, f"must be positive, got {value!r}")
        return float(value)

    def flag(self, name: str, default: Any = REQUIRED) -> bool:
        return self._value(name, default, bool, "true or false")

    def text(self, name: str, default: Any = REQUIRED) -> str:
        return self._value(name, default, str, "a string")

    def integers(self, name: str, default: Any = REQUIRED) -> tuple[int, ...]:
        values = self._value(name, default, (list, tuple), "a list of integers")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise self.error(name, f"must be a list of integers, got {values!r}")
        return tuple(values)

    def ids_by_name(self, name: str) -> dict[str, int]:
        """A {name: integer id} object; empty where absent."""
        ids = self._value(name, {}, dict, "an object of integer ids") or {}
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ids.values()):
            raise self.error(name, f"must be an object of integer ids, got {ids!r}")
        return dict(ids)

    def _value(self, name: str, default: Any, kind: type | tuple[type, ...], what: str) -> Any:
        if self.data.get(name) is None:
            if default is REQUIRED:
                raise self.error(name, "is missing")
            return default
        value = self.data[name]
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise self.error(name, f"must be {what}, got {value!r}")
        return value
