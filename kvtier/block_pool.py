"""Physical KV blocks: a free list and reference counts."""

from __future__ import annotations

from collections import deque


class OutOfBlocks(RuntimeError):
    """Raised by `allocate` when asked for more blocks than are free (ask first)."""


class BlockPool:
    """Owns the ids 0..num_blocks-1 of one tier's blocks.

    Contract: `allocate(n)` hands out exactly n free blocks with ref count 1, or raises
    OutOfBlocks and changes nothing; callers ask `can_allocate(n)` first. `release`
    drops one reference per id and returns a block to the free list when its count
    reaches zero. `share` adds a reference (prefix sharing). A block is either free
    (count 0, in the free list once) or held (count > 0, not in the free list).
    `peak_used` is the most blocks held at once since the pool was made.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._ref_counts = [0] * num_blocks
        self.peak_used = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfBlocks(f"asked for {n} blocks, {len(self._free)} free")
        blocks = [self._free.popleft() for _ in range(n)]
        for block in blocks:
            self._ref_counts[block] = 1
        self.peak_used = max(self.peak_used, self.num_used)
        return blocks

    def share(self, blocks: list[int]) -> None:
        """Add a reference to each (held) block; raises and changes nothing if one is free."""
        free = [b for b in blocks if self._ref_counts[b] == 0]
        if free:
            raise ValueError(f"block {free[0]} is free and cannot be shared")
        for block in blocks:
            self._ref_counts[block] += 1

    def release(self, blocks: list[int]) -> None:
        """Drop a reference to each block; raises and changes nothing if one would go negative."""
        counts: dict[int, int] = {}
        for block in blocks:
            counts[block] = counts.get(block, 0) + 1
        over = [b for b, n in counts.items() if n > self._ref_counts[b]]
        if over:
            raise ValueError(f"block {over[0]} released more often than held")
        for block in blocks:
            self._ref_counts[block] -= 1
            if self._ref_counts[block] == 0:
                self._free.append(block)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]

    def check_integrity(self) -> None:
        free = set(self._free)
        assert len(free) == len(self._free), "a block is in the free list twice"
        for block, count in enumerate(self._ref_counts):
            assert count >= 0, f"block {block} has negative ref count"
            assert (count == 0) == (block in free), f"block {block}: ref count {count}, free={block in free}"
