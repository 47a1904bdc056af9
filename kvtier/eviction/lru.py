"""Least recently used first."""

from __future__ import annotations

from kvtier.eviction.policy import EvictionPolicy, UsageHint


class LRUPolicy(EvictionPolicy):
    """Evicts the sequence used longest ago. It knows nothing of future use, so a
    background load never evicts for room: it fits in free blocks or is refused."""

    name = "lru"

    def key(self, hint: UsageHint) -> float:
        return hint.last_used

    def may_displace(self, victim: UsageHint, loader: UsageHint) -> bool:
        return False
