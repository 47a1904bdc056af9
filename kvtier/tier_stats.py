"""Cumulative counters of a host tier."""

from __future__ import annotations

from kvtier.block_pool import BlockPool
from kvtier.eviction import EVICTION_POLICIES, NO_EVICTION
from kvtier.transfer_job import STORE, TransferJob

PRELOAD_OUTCOMES = ("admitted", "resident", "too_late", "no_room")
COUNTERS = (
    "evictions", *(f"evictions_{name}" for name in EVICTION_POLICIES.names() if name != NO_EVICTION),
    "loads_background_bytes", "loads_background_seconds", "loads_foreground_bytes", "loads_foreground_seconds",
    "loads_cancelled", "stores_bytes", "stores_seconds", "stores_skipped", "host_copies_dropped",
    *(f"preloads_{outcome}" for outcome in PRELOAD_OUTCOMES),
    "preloads_completed", "preloads_cancelled", "preloads_promoted", "preloads_hit",
)


class TierStats:
    """Counts (blocks, bytes, seconds, events) since the tier was made; `as_dict` adds host blocks used and peak.

    `evictions` are device blocks evicted (also per policy name); transfer bytes and
    seconds are what was copied, cancelled transfers included; `preloads_*` count
    each preload outcome, then completions, cancels, promotions to foreground and
    hits (a completed preload used before being evicted again).
    """

    def __init__(self) -> None:
        self.counts: dict[str, float] = dict.fromkeys(COUNTERS, 0)

    def add(self, name: str, amount: float = 1) -> None:
        self.counts[name] += amount

    def add_transfer(self, job: TransferJob, num_bytes: int) -> None:
        what = "stores" if job.kind == STORE else "loads_background" if job.background else "loads_foreground"
        self.counts[f"{what}_bytes"] += num_bytes
        self.counts[f"{what}_seconds"] += job.seconds

    def as_dict(self, host_pool: BlockPool | None = None) -> dict[str, float]:
        used, peak = (0, 0) if host_pool is None else (host_pool.num_used, host_pool.peak_used)
        return {**self.counts, "host_blocks_used": used, "host_blocks_peak": peak}
