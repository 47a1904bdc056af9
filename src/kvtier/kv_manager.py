"""Per-sequence KV residency on top of a block pool: the mechanism later tiers extend."""

from __future__ import annotations

from collections.abc import Hashable

from kvtier.block_pool import BlockPool
from kvtier.block_table import BlockTable
from kvtier.config import KVPoolConfig
from kvtier.kv_cache import KVCache


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class KVCacheManager:
    """Owns a stage's KV cache, its block pool and every sequence's block table.

    Ask-then-commit: `can_reserve(seq, n)` says whether `reserve(seq, n)` would
    succeed; `reserve` grows the sequence's table to hold n tokens or raises and
    changes nothing. `truncate` and `free` give blocks back. Slot ids (block * size
    + offset) index the cache flattened over blocks and offsets.
    """

    def __init__(self, config: KVPoolConfig) -> None:
        self.config = config
        self.block_size = config.block_size
        self.pool = BlockPool(config.num_blocks)
        self.cache = KVCache(config)
        self._tables: dict[Hashable, BlockTable] = {}

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

    def table(self, seq: Hashable) -> BlockTable:
        return self._tables.get(seq) or BlockTable()

    def num_blocks_held(self, seq: Hashable) -> int:
        return self.table(seq).num_blocks

    def num_new_blocks(self, seq: Hashable, num_tokens: int) -> int:
        """Blocks `reserve(seq, num_tokens)` would allocate."""
        return max(0, blocks_for(num_tokens, self.block_size) - self.table(seq).num_blocks)

    def can_reserve(self, seq: Hashable, num_tokens: int) -> bool:
        return self.pool.can_allocate(self.num_new_blocks(seq, num_tokens))

    def fits_at_all(self, num_tokens: int) -> bool:
        return blocks_for(num_tokens, self.block_size) <= self.pool.num_blocks

    def reserve(self, seq: Hashable, num_tokens: int) -> None:
        new_blocks = self.pool.allocate(self.num_new_blocks(seq, num_tokens))
        table = self._tables.setdefault(seq, BlockTable())
        table.block_ids.extend(new_blocks)
        table.num_tokens = max(table.num_tokens, num_tokens)

    def truncate(self, seq: Hashable, num_tokens: int) -> None:
        """Keep the first `num_tokens` tokens of `seq`; release blocks past them."""
        table = self._tables.get(seq)
        if table is None or num_tokens >= table.num_tokens:
            return
        keep = blocks_for(num_tokens, self.block_size)
        self.pool.release(table.block_ids[keep:])
        del table.block_ids[keep:]
        table.num_tokens = num_tokens

    def free(self, seq: Hashable) -> None:
        table = self._tables.pop(seq, None)
        if table is not None:
            self.pool.release(table.block_ids)

    def slot_ids(self, seq: Hashable, start: int, end: int) -> list[int]:
        """Flat cache slots of positions [start, end) of `seq` (which must be reserved)."""
        ids, size = self._tables[seq].block_ids, self.block_size
        return [ids[p // size] * size + p % size for p in range(start, end)]

    def check_integrity(self) -> None:
        self.pool.check_integrity()
        held: dict[int, int] = {}
        for seq, table in self._tables.items():
            assert table.num_blocks == blocks_for(table.num_tokens, self.block_size), f"{seq}: table size off"
            for block in table.block_ids:
                held[block] = held.get(block, 0) + 1
        for block in range(self.pool.num_blocks):
            assert self.pool.ref_count(block) == held.get(block, 0), f"block {block}: ref count != tables"
