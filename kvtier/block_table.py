"""One sequence's mapping from logical block index to physical block id."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BlockTable:
    """The live blocks of one sequence, in order; `num_tokens` slots are reserved.

    `block_ids` starts with `num_state` blocks that hold no positions: a fixed-size state
    the sequence keeps beside its KV (a history branch's), allocated with its first block
    and freed with it. The position blocks follow. Token position p lives in logical block
    `p // block_size` at offset `p % block_size`. Logical blocks
    [num_sinks, num_sinks + num_dropped) were freed in place (a window slid past them); the
    others are position blocks, in order: logical block i is `block_ids[num_state + i]`
    before the dropped ones and `block_ids[num_state + i - num_dropped]` after them.
    Without dropped blocks (num_dropped 0) `num_sinks` means nothing and is 0.
    """

    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0
    num_sinks: int = 0
    num_dropped: int = 0
    num_state: int = 0

    @property
    def num_blocks(self) -> int:
        """Live blocks, state blocks included."""
        return len(self.block_ids)

    @property
    def state_ids(self) -> list[int]:
        return self.block_ids[: self.num_state]

    def index_of(self, logical: int) -> int:
        """Where logical block `logical` is in `block_ids`; ValueError if it was dropped."""
        if logical < self.num_sinks:
            return self.num_state + logical
        if logical < self.num_sinks + self.num_dropped:
            raise ValueError(f"logical block {logical} was dropped")
        return self.num_state + logical - self.num_dropped

    def live_index(self, logical: int) -> int:
        """Where logical block `logical` is or would be in `block_ids`, for a block at or past the dropped ones."""
        return self.num_state + logical - self.num_dropped

    def live_blocks(self, num_logical: int) -> tuple[list[int], list[int]]:
        """The live blocks among logical blocks [0, num_logical), and the logical index of each."""
        ids = self.block_ids[self.num_state :]
        if num_logical <= self.num_sinks or not self.num_dropped:
            return ids[:num_logical], list(range(num_logical))
        count = num_logical - self.num_dropped
        return ids[:count], [*range(self.num_sinks), *range(self.num_sinks + self.num_dropped, num_logical)]

    def drop(self, num_sinks: int, stop: int) -> list[int]:
        """Drop the live logical blocks in [num_sinks, stop) and return their ids (for the pool to release).

        ValueError (nothing changed) if earlier drops kept another number of sink blocks.
        """
        if self.num_dropped and num_sinks != self.num_sinks:
            raise ValueError(f"blocks were dropped after {self.num_sinks} sink blocks, not {num_sinks}")
        count = stop - num_sinks - self.num_dropped
        if count <= 0:
            return []
        first = self.num_state + num_sinks
        freed = self.block_ids[first : first + count]
        del self.block_ids[first : first + count]
        self.num_sinks, self.num_dropped = num_sinks, self.num_dropped + count
        return freed

    def skip(self, num_tokens: int, block_size: int) -> None:
        """Reserve up to `num_tokens` (a block boundary past the reserved end, itself one) without holding
        the blocks in between: they count as dropped and the live blocks as sinks (a sequence that resumes
        past positions whose KV it will never hold). ValueError (nothing changed) if blocks were dropped
        already or either end is inside a block."""
        if self.num_dropped or self.num_tokens % block_size or num_tokens % block_size:
            raise ValueError(f"cannot skip from position {self.num_tokens} to {num_tokens} "
                             f"(blocks of {block_size}, {self.num_dropped} dropped)")
        self.num_sinks = len(self.block_ids) - self.num_state
        self.num_dropped = num_tokens // block_size - self.num_sinks
        self.num_tokens = num_tokens
