"""The sweep spec: the command to run, its shared settings and a grid of values, read from YAML."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.duplex.options import DuplexOptions
from lab.replay.options import ReplayOptions
from liveserve.config.document import Override
from liveserve.config.reader import ConfigError, Section, build, coerce

COMMANDS: dict[str, type] = {"replay": ReplayOptions, "duplex": DuplexOptions}
DEFAULT_COMMAND = "replay"
SET = "set"  # the spec's name of the options' `overrides` (`--set`)
NOT_SWEPT = {
    "url": "every point starts its own fresh server",
    "admission_set": "give set: [admission.NAME=VALUE, ...] instead",
}


def field_types(options: type) -> dict[str, Any]:
    """The spec keys of an options dataclass and their types (`set` for `overrides`)."""
    hints = typing.get_type_hints(options)
    return {SET if f.name == "overrides" else f.name: hints[f.name] for f in dataclasses.fields(options)}


@dataclass(frozen=True)
class SweepSpec:
    """A command, settings every point shares, and the grid: key -> values, in the order written.

    Keys are the fields of the command's options (`ReplayOptions`, `DuplexOptions`), `set`
    standing for `overrides`; values are typed as those fields. The points are the
    product of the grid's lists, the first key varying slowest. A point's overrides are
    the shared `set` then the grid's.
    """

    source: Path
    command: str
    shared: dict[str, Any]
    grid: dict[str, tuple[Any, ...]]

    def points(self) -> list[Any]:
        """One options object per combination of grid values, in product order."""
        return [self._options(index, combo) for index, combo in enumerate(self._combinations(), start=1)]

    def point_of(self, options: Any) -> dict[str, Any]:
        """The grid keys' values in `options`, JSON-ready (paths and overrides as strings,
        infinities as "inf")."""
        return {name: _json_value(self._value(options, name)) for name in self.grid}

    @property
    def varied(self) -> tuple[str, ...]:
        """The grid keys given more than one value."""
        return tuple(name for name, values in self.grid.items() if len(values) > 1)

    def policy_of(self, point: dict[str, Any]) -> str:
        """The policy preset of a replay point (from the grid, the shared settings or the default)."""
        return point.get("policy", self.shared.get("policy", ReplayOptions.policy))

    def _value(self, options: Any, name: str) -> Any:
        if name == SET:
            return options.overrides[len(self.shared.get(SET, ())):]
        return getattr(options, name)

    def _combinations(self) -> list[dict[str, Any]]:
        return [dict(zip(self.grid, values)) for values in itertools.product(*self.grid.values())]

    def _options(self, index: int, combo: dict[str, Any]) -> Any:
        fields = {**self.shared, **combo}
        if SET in fields:
            fields["overrides"] = (*self.shared.get(SET, ()), *combo.get(SET, ()))
            del fields[SET]
        return build(COMMANDS[self.command], f"point {index} ({describe(combo)})", **fields)


def describe(point: dict[str, Any]) -> str:
    """`key=value ...`, the way progress lines and errors name a point."""
    return " ".join(f"{name}={show(name, value)}" for name, value in point.items())


def show(name: str, value: Any) -> str:
    """A value as tables and legends show it (no concurrency limit is "unlimited")."""
    if name == SET:
        return ", ".join(map(str, value)) or "none"
    return "unlimited" if name == "max_concurrency" and value is None else str(value)


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read and check the spec at `path`, every point included; every problem is a
    ConfigError naming the file and the key or point."""
    source = Path(path)
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{source}: sweep spec not found") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: cannot read the sweep spec: {exc}") from None
    try:
        spec = _parse(data, source)
        spec.points()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return spec


def _parse(data: object, source: Path) -> SweepSpec:
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"expected a mapping with `replay` and `grid`, got {type(data).__name__}")
    root = Section(data, "")
    command = root.value("command", str, DEFAULT_COMMAND)
    if command not in COMMANDS:
        raise ConfigError(f"command: expected one of {', '.join(COMMANDS)}, got {command!r}")
    types = field_types(COMMANDS[command])
    shared_section, grid_section = root.section(command), root.section("grid")
    root.finish()
    shared = {name: _typed(types[name], value, shared_section.where(name))
              for name, value in _checked(shared_section, command, types)}
    grid = {name: _grid_values(types[name], values, grid_section.where(name))
            for name, values in _checked(grid_section, command, types)}
    if not grid:
        raise ConfigError(f"grid: required: a mapping of {command} option -> list of values")
    for name in grid:
        if name in shared and name != SET:
            raise ConfigError(f"grid.{name}: also set in {command}; set it in one place")
    return SweepSpec(source, command, shared, grid)


def _checked(section: Section, command: str, types: dict[str, Any]) -> list[tuple[str, Any]]:
    """The section's items, each key an option of `command` a sweep may set."""
    for key in section.data:
        where = section.where(str(key))
        if key in NOT_SWEPT and key in types:
            raise ConfigError(f"{where}: not allowed in a sweep: {NOT_SWEPT[key]}")
        if key not in types:
            close = difflib.get_close_matches(str(key), types, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: not a {command} option{hint}")
    return list(section.data.items())


def _grid_values(kind: Any, values: object, where: str) -> tuple[Any, ...]:
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{where}: expected a non-empty list of values, got {values!r}")
    typed: list[Any] = []
    for index, value in enumerate(values):
        item = _typed(kind, [value] if isinstance(value, str) and _is_overrides(kind) else value,
                      f"{where}[{index}]")
        if item in typed:
            raise ConfigError(f"{where}[{index}]: repeats {value!r}")
        typed.append(item)
    return tuple(typed)


def _typed(kind: Any, value: Any, where: str) -> Any:
    """`value` as an option of type `kind`; a list of `KEY.PATH=VALUE` strings for overrides."""
    if not _is_overrides(kind):
        return coerce(value, kind, where)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of KEY.PATH=VALUE strings, got {value!r}")
    try:
        return tuple(Override.parse(item) for item in value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _is_overrides(kind: Any) -> bool:
    return kind == tuple[Override, ...]


def _json_value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):  # overrides: the only tuples a grid sets
        return [str(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
