"""Farthest predicted next use first."""

from __future__ import annotations

from kvtier.eviction.policy import EvictionPolicy, UsageHint


class NextUsePolicy(EvictionPolicy):
    """Evicts the sequence whose predicted next use is farthest away (Belady's rule on
    predictions). A background load may evict only sequences needed later than itself."""

    name = "next_use"

    def key(self, hint: UsageHint) -> float:
        return -hint.next_use

    def may_displace(self, victim: UsageHint, loader: UsageHint) -> bool:
        return victim.next_use > loader.next_use
