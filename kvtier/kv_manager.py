"""Per-sequence KV residency: a device block pool, optionally with a host tier behind it.

Over 300 lines because it is the one facade the stages see: many short methods (3-8 lines), each
a KV operation the scheduler, the residency manager or the runners call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from kvtier.block_copier import BlockCopier
from kvtier.block_pool import BlockPool
from kvtier.block_table import BlockTable
from kvtier.config import HostTierConfig, KVPoolConfig
from kvtier.device_only_tier import DeviceOnlyTier
from kvtier.eviction import EVICTION_POLICIES
from kvtier.kv_cache import KVCache
from kvtier.offloader import Offloader
from kvtier.sequence_kv import SequenceKV
from kvtier.tier import KVTier
from kvtier.transfer_job import LOAD

_NO_BLOCKS = BlockTable()  # what `table` shows for an unknown sequence: read only


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class KVCacheManager:
    """Owns a stage's KV cache, its block pool and every sequence's blocks, on the device and the host.

    Ask-then-commit: `can_reserve(seq, n)` says whether `reserve(seq, n)` would
    succeed (`num_new_blocks`: with how many new blocks); `reserve` grows the
    sequence's table to hold n tokens or raises and changes nothing. `truncate` and
    `free` give blocks back. Slot ids (block * size + offset) index the cache
    flattened over blocks and offsets. These calls are the hot path: O(1), and no
    allocation when nothing changes.

    Windows: `drop` frees in place the blocks between a sequence's sink blocks and
    the block a window starts in; positions keep counting (tables, reserve and slot
    ids stay in logical positions) and dropped positions can never be read, written
    or kept again; `skip` counts as dropped blocks a sequence resumes past without
    reserving them. A windowed sequence moves to the host tier and back like any
    other: the tier sees its live blocks only. `reserve_state` gives a new sequence
    state blocks that hold no positions (see BlockTable): they count as its blocks,
    move between the tiers with it and are freed with it; `state_blocks` are their ids, and
    `state_written` says they changed.

    Tiers (KVTier): `tier` is a host tier, an Offloader (eviction "lru" or "next_use"
    with a HostTierConfig), or the DeviceOnlyTier (eviction "none"): nothing offloaded.
    Calls about one sequence go through the manager; the tier as a whole (`evict`,
    `poll`, `stats`, `worker`...) is asked directly. A sequence's logical blocks are a
    device prefix (`table(seq)`, what `num_blocks_held` counts) and a suffix only on
    the host (`num_offloaded_blocks`). Tables and slot ids are for resident sequences
    only; `reserve` raises on a sequence that is not. Hints (`set_evictable`,
    `set_next_use`, `protect`) say which sequences eviction may touch and in what
    order; hints on unknown sequences are ignored. `store` backs a sequence's device
    blocks up on the host, `load`/`preload` bring a suffix back (see Offloader for the
    protocol). A reserve past `table.num_tokens` invalidates the host copy of the block
    it writes into and those after, so write only positions you reserved and store only
    what is written.

    Threads: every method runs on the engine thread; a worker copies bytes, and
    `on_transfer_done` is called on its thread after each transfer. `transfer_mode`
    "inline" runs no transfer until `tier.worker.run_chunk()`/`run_all()` is called
    (deterministic tests, a simulation's virtual clock); the default "thread" runs them as they come.
    `copier_type` moves the bytes (a simulation's moves none and reports its link's time).
    """

    def __init__(self, config: KVPoolConfig, host: HostTierConfig | None = None, eviction: str = "none",
                 clock: Callable[[], float] = time.monotonic, on_transfer_done: Callable[[], None] | None = None,
                 transfer_mode: str = "thread", copier_type: type[BlockCopier] = BlockCopier) -> None:
        policy = EVICTION_POLICIES.make(eviction)
        if (policy is None) != (host is None):
            need = "takes no host tier" if policy is None else "needs a host tier (HostTierConfig)"
            raise ValueError(f"eviction policy {eviction!r} {need}")
        self.config = config
        self.block_size = config.block_size
        self.pool = BlockPool(config.num_blocks)
        self.cache = KVCache(config)
        self.clock = clock
        self._seqs: dict[Hashable, SequenceKV] = {}
        self._num_created = 0
        self.tier: KVTier = DeviceOnlyTier() if host is None else Offloader(
            self.pool, self.cache, host, policy, clock, transfer_mode, on_transfer_done, copier_type)

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_used

    @property
    def peak_used_blocks(self) -> int:
        return self.pool.peak_used

    @property
    def occupancy(self) -> float:
        return self.pool.num_used / self.pool.num_blocks

    @property
    def num_offloaded_blocks_total(self) -> int:
        """Blocks whose KV is on the host only, over all sequences: what the device would take back."""
        return sum(state.num_offloaded for state in self._seqs.values())

    def table(self, seq: Hashable) -> BlockTable:
        state = self._seqs.get(seq)
        return _NO_BLOCKS if state is None else state.table

    def num_blocks_held(self, seq: Hashable) -> int:
        """Device blocks held."""
        return len(self.table(seq).block_ids)

    def num_resident_tokens(self, seq: Hashable) -> int:
        """Reserved positions of `seq` whose KV is on the device (neither dropped nor offloaded)."""
        table, size = self.table(seq), self.block_size
        held = max(0, len(table.block_ids) - table.num_state) + table.num_dropped
        return min(table.num_tokens, held * size) - table.num_dropped * size

    def dropped(self, seq: Hashable) -> range:
        """The positions of `seq` whose blocks `drop` freed (empty if none)."""
        table, size = self.table(seq), self.block_size
        return range(table.num_sinks * size, (table.num_sinks + table.num_dropped) * size)

    def num_offloaded_blocks(self, seq: Hashable) -> int:
        state = self._seqs.get(seq)
        return 0 if state is None else state.num_offloaded

    def is_resident(self, seq: Hashable) -> bool:
        """Every logical block is on the device and no load is in flight (unknown: True)."""
        state = self._seqs.get(seq)
        return state is None or (not state.num_offloaded and (state.job is None or state.job.kind != LOAD))

    def num_new_blocks(self, seq: Hashable, num_tokens: int, start: int = 0) -> int:
        """Blocks `skip(seq, start)` then `reserve(seq, num_tokens)` would allocate."""
        state = self._seqs.get(seq)
        counted = 0 if state is None else _num_position_blocks(state) + state.num_offloaded
        needed = -(-num_tokens // self.block_size) - max(counted, start // self.block_size)
        return needed if needed > 0 else 0

    def can_reserve(self, seq: Hashable, num_tokens: int) -> bool:
        needed = -(-num_tokens // self.block_size)
        state = self._seqs.get(seq)
        if state is not None:
            if state.num_offloaded:
                return False
            needed -= _num_position_blocks(state)
        return needed <= self.pool.num_free

    def fits_at_all(self, num_tokens: int) -> bool:
        return -(-num_tokens // self.block_size) <= self.pool.num_blocks

    def reserve(self, seq: Hashable, num_tokens: int) -> None:
        state = self._seqs.get(seq)
        if state is None:
            self._add(seq, BlockTable(self.pool.allocate(-(-num_tokens // self.block_size)), num_tokens))
            return
        if state.num_offloaded:
            raise ValueError(f"sequence {seq!r} is not resident: load it before reserving")
        if num_tokens > state.table.num_tokens:
            self._grow(state, num_tokens)
        if state.is_evictable:
            self.tier.touch(state)

    def reserve_state(self, seq: Hashable, num_blocks: int) -> None:
        """Give `seq`, which holds nothing yet, `num_blocks` state blocks (zeroed, see BlockTable); ValueError
        if it holds blocks or positions, RuntimeError (nothing changed) if the pool has not that many free."""
        state = self._seqs.get(seq)
        if state is not None and (state.table.block_ids or state.table.num_tokens or state.num_offloaded):
            raise ValueError(f"sequence {seq!r} already has blocks: state blocks come first")
        block_ids = self.pool.allocate(num_blocks)
        for keys, values in zip(self.cache.keys, self.cache.values):
            keys[block_ids] = 0
            values[block_ids] = 0
        if state is None:
            self._add(seq, BlockTable(block_ids, num_state=num_blocks))
            return
        state.table.block_ids, state.table.num_state = block_ids, num_blocks
        self.tier.refresh(state)

    def state_blocks(self, seq: Hashable) -> list[int]:
        """The state blocks of a resident `seq` (empty: none)."""
        return self._seqs[seq].table.state_ids

    def state_written(self, seq: Hashable) -> None:
        """The state blocks of `seq` were written: their host copies are stale, and with them every later
        one (host copies are a prefix), so the next write-back copies all its live blocks."""
        state = self._seqs.get(seq)
        if state is not None and state.table.num_state:
            self.tier.invalidate(state, 0)

    def skip(self, seq: Hashable, start: int) -> None:
        """`seq` resumes writing at `start`, past its reserved end: the blocks in between never hold KV and
        count as dropped (see BlockTable.skip); nothing if `start` is not past the end."""
        if start <= self.table(seq).num_tokens:
            return
        state = self._seqs.get(seq)
        table = BlockTable() if state is None else state.table
        table.skip(start, self.block_size)
        if state is None:
            self._add(seq, table)

    def _add(self, seq: Hashable, table: BlockTable) -> None:
        self._num_created += 1
        self._seqs[seq] = SequenceKV(seq, self._num_created, table)
        self._seqs[seq].hint.last_used = self.clock()

    def _grow(self, state: SequenceKV, num_tokens: int) -> None:
        table, size = state.table, self.block_size
        needed = -(-num_tokens // size) - _num_position_blocks(state)
        new_blocks = self.pool.allocate(needed) if needed > 0 else None
        written = table.live_index(table.num_tokens // size)  # the first block the coming writes touch
        if len(state.host_ids) > written or state.job is not None:
            self.tier.invalidate(state, written)
        if new_blocks is not None:
            table.block_ids.extend(new_blocks)
        table.num_tokens = num_tokens

    def truncate(self, seq: Hashable, num_tokens: int) -> None:
        """Keep the first `num_tokens` tokens of `seq`; release blocks (both tiers) past them.

        A host copy of the block cut in the middle stays: it holds the kept positions,
        and the next write past them invalidates it. Keeping part of the dropped
        positions raises ValueError (nothing changed); keeping only positions before
        them forgets the drop.
        """
        state = self._seqs.get(seq)
        if state is None or num_tokens >= state.table.num_tokens:
            return
        table, keep = state.table, blocks_for(num_tokens, self.block_size)
        dropped = self.dropped(seq)
        if dropped.start < num_tokens < dropped.stop:
            raise ValueError(f"cannot keep {num_tokens} tokens of {seq!r}: positions {dropped.start}-"
                             f"{dropped.stop - 1} were dropped")
        if num_tokens <= dropped.start:
            table.num_sinks = table.num_dropped = 0
        live = table.live_index(keep)
        if len(table.block_ids) > live:
            self.pool.release(table.block_ids[live:])
            del table.block_ids[live:]
        table.num_tokens = num_tokens
        state.num_offloaded = live - len(table.block_ids)
        self.tier.invalidate(state, live)

    def free(self, seq: Hashable) -> None:
        """Give back everything of `seq`, both tiers; cancels its transfer (blocks in a copy wait for it)."""
        state = self._seqs.pop(seq, None)
        if state is None:
            return
        self.tier.forget(state)
        self.pool.release(state.table.block_ids)

    def slot_ids(self, seq: Hashable, start: int, end: int) -> list[int]:
        """Flat cache slots of positions [start, end) of `seq` (reserved, resident, not dropped: else ValueError)."""
        table, size = self._seqs[seq].table, self.block_size
        ids = table.block_ids
        if not table.num_dropped and not table.num_state:
            return [ids[p // size] * size + p % size for p in range(start, end)]
        return [ids[table.index_of(p // size)] * size + p % size for p in range(start, end)]

    def live_blocks(self, seq: Hashable, end: int) -> tuple[list[int], list[int]]:
        """The live blocks of `seq` holding positions below `end`, and the logical index of each."""
        return self._seqs[seq].table.live_blocks(blocks_for(end, self.block_size))

    def drop(self, seq: Hashable, num_sink_tokens: int, keep_from: int) -> int:
        """Free in place the blocks of `seq` after its sink blocks (those holding positions below
        `num_sink_tokens`) and before the block holding position `keep_from`; how many were freed.

        Raises ValueError with a sink count other than earlier drops'. The host copies of the freed
        blocks go too; a sequence that is not resident drops nothing.
        """
        state = self._seqs.get(seq)
        if state is None or state.num_offloaded:
            return 0
        table, size = state.table, self.block_size
        num_sinks = blocks_for(num_sink_tokens, size)
        freed = table.drop(num_sinks, min(keep_from, table.num_tokens) // size)
        if freed:
            self.tier.dropped(state, table.num_state + num_sinks, len(freed))
            self.pool.release(freed)
        return len(freed)

    def set_evictable(self, seq: Hashable, evictable: bool) -> None:
        """Idle KV (True) may be evicted; KV in use (False, the default) is protected.

        Marking in use a sequence that a completed preload made resident counts a preload hit.
        """
        state = self._seqs.get(seq)
        if state is not None:
            self.tier.set_evictable(state, evictable)

    def set_next_use(self, seq: Hashable, at: float) -> None:
        """Predicted clock time of the sequence's next use (next_use evicts the farthest first)."""
        state = self._seqs.get(seq)
        if state is not None and state.hint.next_use != at:
            state.hint.next_use = at
            if state.is_evictable:
                self.tier.refresh(state)

    def protect(self, seq: Hashable, until: float) -> None:
        """Not an eviction candidate before clock time `until` (protections only ever extend)."""
        state = self._seqs.get(seq)
        if state is not None and until > state.protected_until:
            state.protected_until = until
            self.tier.refresh(state)

    def store(self, seq: Hashable) -> None:
        """Start writing back the device blocks of `seq` that lack a host copy (skipped if the host is full)."""
        state = self._seqs.get(seq)
        if state is not None:
            self.tier.store(state)

    def load(self, seq: Hashable, background: bool = False) -> bool:
        """Start bringing the offloaded suffix of `seq` back; False (nothing changed) if no room can be made.

        Device blocks are allocated now, evicting candidates in policy order if needed;
        a background load evicts only what the policy's `may_displace` allows (next_use:
        sequences needed later than this one; lru: none, free blocks only). A
        foreground load of a sequence with a background load in flight promotes it.
        Done when `is_resident(seq)` (after `poll`).
        """
        state = self._seqs.get(seq)
        return state is None or self.tier.load(state, background)

    def preload(self, seq: Hashable, lead_s: float, keep_free: int = 0) -> str:
        """Speech-triggered preload of `seq`, needed in about `lead_s` seconds, leaving `keep_free`
        device blocks free (room for what runs meanwhile).

        "admitted": a background load started (or one is already in flight);
        "resident": nothing is offloaded; "too_late": at the measured link rate the
        copy takes longer than `lead_s`; "no_room": the load found no room. A preload
        that completes protects its sequence for what is left of `lead_s`, at most
        `warm_protect_s`.
        """
        return self.tier.preload(self._seqs.get(seq), lead_s, keep_free)

    def cancel_load(self, seq: Hashable) -> bool:
        """Cancel a background load (a running one stops after its chunk); host copies stay valid.

        The load's device blocks are released once no copy into them can run. False
        if `seq` had no background load in flight.
        """
        state = self._seqs.get(seq)
        return state is not None and self.tier.cancel_load(state)

    def check_integrity(self) -> None:
        self.pool.check_integrity()
        assert _NO_BLOCKS == BlockTable(), "the unknown-sequence table was written to"
        held = self.tier.check_integrity(self._seqs.values())
        for seq, state in self._seqs.items():
            table = state.table
            logical = blocks_for(table.num_tokens, self.block_size)
            live = table.num_blocks + state.num_offloaded
            assert live + table.num_dropped == logical + table.num_state, f"{seq}: table size off"
            assert table.num_state + table.num_sinks <= live or not table.num_dropped, f"{seq}: bad drop"
            held.update(table.block_ids)
        for block in range(self.pool.num_blocks):
            assert self.pool.ref_count(block) == held[block], f"block {block}: ref count != tables"


def _num_position_blocks(state: SequenceKV) -> int:
    """Logical blocks of a resident sequence that are live or dropped (its state blocks left out)."""
    return len(state.table.block_ids) - state.table.num_state + state.table.num_dropped
