"""Eviction policies chosen by name: "none" (no host tier), "lru", "next_use"."""

from __future__ import annotations

from collections.abc import Callable

from kvtier.eviction.policy import EvictionPolicy, UsageHint

NO_EVICTION = "none"


def _lru() -> EvictionPolicy:
    from kvtier.eviction.lru import LRUPolicy

    return LRUPolicy()


def _next_use() -> EvictionPolicy:
    from kvtier.eviction.next_use import NextUsePolicy

    return NextUsePolicy()


_REGISTRY: dict[str, Callable[[], EvictionPolicy]] = {"lru": _lru, "next_use": _next_use}


def eviction_policy_names() -> tuple[str, ...]:
    return (NO_EVICTION, *_REGISTRY)


def make_eviction_policy(name: str) -> EvictionPolicy | None:
    """The policy registered as `name`; None for "none" (KV stays on the device or is dropped)."""
    if name not in eviction_policy_names():
        raise ValueError(f"unknown eviction policy {name!r}; choose from {list(eviction_policy_names())}")
    return None if name == NO_EVICTION else _REGISTRY[name]()


__all__ = ["NO_EVICTION", "EvictionPolicy", "UsageHint", "eviction_policy_names", "make_eviction_policy"]
