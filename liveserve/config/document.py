"""A config as a YAML document, before validation: `base:` inheritance and `--set` overrides.

A document may name a `base` (a shipped config's name, or a path relative to the document):
the base is read first and the document's mappings are merged into it, key by key, so a
config of a few lines can say how it differs. `--set stages.thinker.kv.num_blocks=256` sets
one key of the merged document (the value is read as YAML: `null`, `2.0`, `[a, b]`,
`{tokens: 256}`); the loader then validates the result as it does any config, so a
misspelt key or a bad value is named the same way.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from liveserve.config.reader import ConfigError

MAX_BASE_DEPTH = 8


@dataclass(frozen=True)
class Override:
    """One `KEY.PATH=VALUE` setting."""

    path: tuple[str, ...]
    value: Any

    @classmethod
    def parse(cls, text: str) -> Override:
        key, sep, raw = text.partition("=")
        path = tuple(key.strip().split("."))
        if not sep or not all(path):
            raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. stages.thinker.kv.num_blocks=256")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {text!r}: the value is not YAML ({exc})") from None
        return cls(path, value)

    @property
    def key(self) -> str:
        return ".".join(self.path)

    def __str__(self) -> str:
        return f"{self.key}={yaml.safe_dump(self.value, default_flow_style=True).strip().removesuffix('...').strip()}"


def override_argument(text: str) -> Override:
    """`--set KEY.PATH=VALUE` for argparse: a malformed one is a usage error naming it."""
    try:
        return Override.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_override_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, example: str) -> None:
    """The repeatable `--set KEY.PATH=VALUE` flag; its Overrides land in `args.overrides`, in order."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], type=override_argument,
                        metavar="KEY.PATH=VALUE", help=f"override one config key, e.g. {example} (repeatable)")


def apply_overrides(data: object, overrides: Iterable[Override]) -> dict:
    """A copy of the document `data` with every override set (missing mappings are created)."""
    derived = copy.deepcopy(data) if data is not None else {}
    if not isinstance(derived, dict):
        raise ConfigError(f"expected a mapping at the top level, got {type(derived).__name__}")
    for override in overrides:
        node = derived
        for depth, part in enumerate(override.path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(override.path[:depth + 1])
                raise ConfigError(f"--set {override.key}: {where} is not a mapping (it is {child!r})")
            node = child
        node[override.path[-1]] = copy.deepcopy(override.value)
    return derived


def read_document(source: Path, resolve_base: Callable[[str, Path], Path]) -> object:
    """The YAML document at `source` with its `base` chain merged in (`resolve_base(name, relative_to)`)."""
    chain: list[Path] = []
    data = _read_yaml(source)
    while isinstance(data, dict) and "base" in data:
        base = data.pop("base")
        if not isinstance(base, str):
            raise ConfigError(f"{source}: base: expected a config name or path, got {base!r}")
        chain.append(source)
        if len(chain) > MAX_BASE_DEPTH:
            raise ConfigError(f"{chain[0]}: base: more than {MAX_BASE_DEPTH} configs deep (a loop?)")
        source = resolve_base(base, source.parent)
        data = _merge(_read_yaml(source), data)
    return data


def _merge(base: object, child: dict) -> dict:
    """`child` over `base`: mappings merge key by key, anything else replaces."""
    if not isinstance(base, dict):
        return child
    merged = dict(base)
    for key, value in child.items():
        merged[key] = _merge(base[key], value) if isinstance(value, dict) and key in base else value
    return merged


def _read_yaml(source: Path) -> object:
    try:
        return yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config {source}: {exc}") from None
