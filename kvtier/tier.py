"""What stands behind a device pool: a host tier (Offloader) or nothing (DeviceOnlyTier)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable

from kvtier.sequence_kv import SequenceKV
from kvtier.transfer_job import TransferDone
from kvtier.transfer_worker import TransferWorker


class KVTier(ABC):
    """The tier of a KVCacheManager: where device blocks go and come back from, and eviction.

    The manager owns the pool and the sequences' tables and hands the tier the
    `SequenceKV` of a known sequence; engine-thread calls only. Contract:
    - `refresh(state)` follows every change to a sequence's blocks, hints or pins;
      `set_evictable` and `touch` (used now) change its hints; `invalidate(state, b)`:
      host copies of live blocks from b on are stale (a write or a truncation);
      `forget(state)`: the sequence was freed.
    - `evict(n)` frees exactly n device blocks backed on the host, or none and False
      (`loader`: the sequence a background load makes room for); `num_evictable_blocks`
      is what it could free now; `evict_beyond(horizon)` evicts every candidate next
      used after `horizon`, whatever the pressure, and says how many blocks;
      `lift_protections()` ends every protection now (False: there was none).
    - `store`, `load` (False: no room, nothing changed), `preload` (an outcome, see
      KVCacheManager.preload; it leaves `keep_free` device blocks free) and `cancel_load`
      (False: no background load) start or
      stop transfers, which `poll` completes (what completed) and `wait_for_transfer`
      waits for (at most `timeout_s`; whether one waits for `poll`).
    - `dropped(state, first, count)`: the manager freed the sequence's live blocks
      [first, first + count) in place (a window); their host copies go, later ones
      keep theirs. Indices the tier sees count live blocks (state ones included), not
      logical ones.
    - `stats` are cumulative counters (TierStats); `link_gbps` the measured host link
      (None: no host); `worker` copies bytes (None: none); `close` stops it.
    - `check_integrity(states)` checks the tier against the manager's sequences and
      returns the device block references the tier itself holds.
    """

    worker: TransferWorker | None
    link_gbps: float | None

    @property
    @abstractmethod
    def has_transfers_in_flight(self) -> bool: ...

    @property
    @abstractmethod
    def stats(self) -> dict[str, float]: ...

    @abstractmethod
    def refresh(self, state: SequenceKV) -> None: ...

    @abstractmethod
    def set_evictable(self, state: SequenceKV, evictable: bool) -> None: ...

    @abstractmethod
    def touch(self, state: SequenceKV) -> None: ...

    @abstractmethod
    def invalidate(self, state: SequenceKV, block: int) -> None: ...

    @abstractmethod
    def forget(self, state: SequenceKV) -> None: ...

    @abstractmethod
    def num_evictable_blocks(self) -> int: ...

    @abstractmethod
    def evict(self, num_blocks: int, loader: SequenceKV | None = None) -> bool: ...

    @abstractmethod
    def evict_beyond(self, horizon: float) -> int: ...

    @abstractmethod
    def lift_protections(self) -> bool: ...

    @abstractmethod
    def store(self, state: SequenceKV) -> None: ...

    @abstractmethod
    def load(self, state: SequenceKV, background: bool, keep_free: int = 0) -> bool: ...

    @abstractmethod
    def preload(self, state: SequenceKV | None, lead_s: float, keep_free: int = 0) -> str: ...

    @abstractmethod
    def cancel_load(self, state: SequenceKV) -> bool: ...

    @abstractmethod
    def poll(self) -> list[TransferDone]: ...

    @abstractmethod
    def wait_for_transfer(self, timeout_s: float) -> bool: ...

    @abstractmethod
    def dropped(self, state: SequenceKV, first: int, count: int) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def check_integrity(self, states: Iterable[SequenceKV]) -> Counter[int]: ...
