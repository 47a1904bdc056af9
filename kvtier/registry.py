"""Parts chosen by name. Every pluggable part of LiveServe is registered in a Registry: eviction policies
(`kvtier.eviction`), scheduling policies (`stages.policies`) and admission gates (`liveserve.admission`)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class _Entry:
    factory: str | None
    params: str | None


def _resolve(path: str) -> Any:
    """The object a "module:attribute" path names (the attribute may be dotted: "module:Class.method")."""
    module, _, attribute = path.partition(":")
    found: Any = import_module(module)
    for name in attribute.split("."):
        found = getattr(found, name)
    return found


class Registry(Generic[T]):
    """One kind of pluggable part: per name, the factory that makes it and, for a part that takes
    parameters, their frozen params class.

    Factories and params classes are given as "module:attribute" paths and imported when first
    asked for, so a registry imports nothing it registers (no import circles, and only what is
    chosen is loaded). A name registered without a factory makes None (the eviction policy "none":
    no host tier). `make`, `params` and `check` raise a ValueError naming the kind and listing the
    registered names when a name is unknown; names keep the order they were added in.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry] = {}

    def add(self, name: str, factory: str | None, params: str | None = None) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        self._entries[name] = _Entry(factory, params)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def check(self, name: str) -> None:
        """Nothing if `name` is registered; else the ValueError that lists the names."""
        self._entry(name)

    def make(self, name: str, *args: Any, **kwargs: Any) -> T | None:
        """What the factory registered as `name` makes of the arguments (None: registered without one)."""
        factory = self._entry(name).factory
        return None if factory is None else _resolve(factory)(*args, **kwargs)

    def params(self, name: str) -> type | None:
        """The params class registered with `name` (None: the part takes none)."""
        params = self._entry(name).params
        return None if params is None else _resolve(params)

    def _entry(self, name: str) -> _Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise ValueError(f"unknown {self.kind} {name!r}; choose from {list(self._entries)}")
        return entry
