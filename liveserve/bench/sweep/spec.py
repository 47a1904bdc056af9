"""The sweep spec: shared replay settings and a grid of values, read from YAML."""

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

from liveserve.bench.replay.options import ReplayOptions
from liveserve.config_reader import ConfigError, Section, build, coerce

_HINTS = typing.get_type_hints(ReplayOptions)
FIELD_TYPES = {field.name: _HINTS[field.name] for field in dataclasses.fields(ReplayOptions)}
NOT_SWEPT = ("url",)  # every point starts its own server


@dataclass(frozen=True)
class SweepSpec:
    """Replay settings every point shares, and the grid: field -> values, in the order written.

    Values are typed as the `ReplayOptions` field they set; the points are the product of
    the grid's lists, the first field varying slowest.
    """

    source: Path
    replay: dict[str, Any]
    grid: dict[str, tuple[Any, ...]]

    def points(self) -> list[ReplayOptions]:
        """One `ReplayOptions` per combination of grid values, in product order."""
        return [self._options(index, combo) for index, combo in enumerate(self._combinations(), start=1)]

    def point_of(self, options: ReplayOptions) -> dict[str, Any]:
        """The grid fields' values in `options`, JSON-ready (paths as strings, infinities as "inf")."""
        return {name: _json_value(getattr(options, name)) for name in self.grid}

    @property
    def varied(self) -> tuple[str, ...]:
        """The grid fields given more than one value."""
        return tuple(name for name, values in self.grid.items() if len(values) > 1)

    def policy_of(self, point: dict[str, Any]) -> str:
        """The policy preset of a point (from the grid, the shared settings or the default)."""
        return point.get("policy", self.replay.get("policy", ReplayOptions.policy))

    def _combinations(self) -> list[dict[str, Any]]:
        return [dict(zip(self.grid, values)) for values in itertools.product(*self.grid.values())]

    def _options(self, index: int, combo: dict[str, Any]) -> ReplayOptions:
        return build(ReplayOptions, f"point {index} ({describe(combo)})", **self.replay, **combo)


def describe(point: dict[str, Any]) -> str:
    """`field=value ...`, the way progress lines and errors name a point."""
    return " ".join(f"{name}={show(name, value)}" for name, value in point.items())


def show(name: str, value: Any) -> str:
    """A field's value as tables and legends show it (no concurrency limit is "unlimited")."""
    return "unlimited" if name == "max_concurrency" and value is None else str(value)


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read and check the spec at `path`, every point included; every problem is a
    ConfigError naming the file and the field or point."""
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
    replay_section, grid_section = root.section("replay"), root.section("grid")
    root.finish()
    replay = {name: coerce(value, FIELD_TYPES[name], f"replay.{name}") for name, value in _checked(replay_section)}
    grid = {name: _grid_values(name, values) for name, values in _checked(grid_section)}
    if not grid:
        raise ConfigError("grid: required: a mapping of ReplayOptions field -> list of values")
    for name in grid:
        if name in replay:
            raise ConfigError(f"grid.{name}: also set in replay; set it in one place")
    return SweepSpec(source, replay, grid)


def _checked(section: Section) -> list[tuple[str, Any]]:
    """The section's items, each key a ReplayOptions field a sweep may set."""
    for key in section.data:
        where = section.where(str(key))
        if key in NOT_SWEPT:
            raise ConfigError(f"{where}: not allowed in a sweep: every point starts its own fresh server")
        if key not in FIELD_TYPES:
            close = difflib.get_close_matches(str(key), FIELD_TYPES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: not a replay option{hint}")
    return list(section.data.items())


def _grid_values(name: str, values: object) -> tuple[Any, ...]:
    if not isinstance(values, list) or not values:
        raise ConfigError(f"grid.{name}: expected a non-empty list of values, got {values!r}")
    typed: list[Any] = []
    for index, value in enumerate(values):
        item = coerce(value, FIELD_TYPES[name], f"grid.{name}[{index}]")
        if item in typed:
            raise ConfigError(f"grid.{name}[{index}]: repeats {value!r}")
        typed.append(item)
    return tuple(typed)


def _json_value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
