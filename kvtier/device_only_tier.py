"""The tier behind a device pool without a host tier: nothing ever leaves the device."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from kvtier.sequence_kv import SequenceKV
from kvtier.tier import KVTier
from kvtier.tier_stats import TierStats
from kvtier.transfer_job import TransferDone


class DeviceOnlyTier(KVTier):
    """The null tier (eviction "none"): a KVCacheManager without a host tier holds this in an
    Offloader's place, so it never asks whether there is one.

    It answers every call as a tier with nothing offloaded, in flight or evictable
    would: hints and writes change nothing, `evict(n)` succeeds only for n = 0, a load
    or preload finds the sequence resident, `poll` completes nothing and the counters
    stay at zero. It is the one tier that lets a window drop blocks in place.
    """

    worker = None
    link_gbps = None
    has_transfers_in_flight = False

    @property
    def stats(self) -> dict[str, float]:
        return TierStats().as_dict()

    def refresh(self, state: SequenceKV) -> None:
        pass

    def set_evictable(self, state: SequenceKV, evictable: bool) -> None:
        pass

    def touch(self, state: SequenceKV) -> None:
        pass

    def invalidate(self, state: SequenceKV, block: int) -> None:
        pass

    def forget(self, state: SequenceKV) -> None:
        pass

    def num_evictable_blocks(self) -> int:
        return 0

    def evict(self, num_blocks: int, loader: SequenceKV | None = None) -> bool:
        return num_blocks == 0

    def lift_protections(self) -> bool:
        return False

    def evict_beyond(self, horizon: float) -> int:
        return 0

    def store(self, state: SequenceKV) -> None:
        pass

    def load(self, state: SequenceKV, background: bool, keep_free: int = 0) -> bool:
        return True

    def preload(self, state: SequenceKV | None, lead_s: float, keep_free: int = 0) -> str:
        return "resident"

    def cancel_load(self, state: SequenceKV) -> bool:
        return False

    def poll(self) -> list[TransferDone]:
        return []

    def wait_for_transfer(self, timeout_s: float) -> bool:
        return False

    def dropped(self, state: SequenceKV, first: int, count: int) -> None:
        pass

    def close(self) -> None:
        pass

    def check_integrity(self, states: Iterable[SequenceKV]) -> Counter[int]:
        return Counter()
