"""Eviction policies chosen by name: "none" (no host tier), "lru", "next_use"."""

from __future__ import annotations

from kvtier.eviction.policy import EvictionPolicy, UsageHint
from kvtier.registry import Registry

NO_EVICTION = "none"

EVICTION_POLICIES: Registry[EvictionPolicy] = Registry("eviction policy")
EVICTION_POLICIES.add(NO_EVICTION, None)  # KV stays on the device or is dropped
EVICTION_POLICIES.add("lru", "kvtier.eviction.lru:LRUPolicy")
EVICTION_POLICIES.add("next_use", "kvtier.eviction.next_use:NextUsePolicy")


__all__ = ["EVICTION_POLICIES", "NO_EVICTION", "EvictionPolicy", "UsageHint"]
