"""One sequence's mapping from logical block index to physical block id."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BlockTable:
    """The live blocks of one sequence, in position order; `num_tokens` slots are reserved.

    Token position p lives in logical block `p // block_size` at offset `p % block_size`.
    Logical blocks [num_sinks, num_sinks + num_dropped) were freed in place (a window
    slid past them); the others are `block_ids`, in order: logical block i is
    `block_ids[i]` before the dropped ones and `block_ids[i - num_dropped]` after them.
    Without dropped blocks (num_dropped 0) `num_sinks` means nothing and is 0.
    """

    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0
    num_sinks: int = 0
    num_dropped: int = 0

    @property
    def num_blocks(self) -> int:
        """Live blocks."""
        return len(self.block_ids)

    def index_of(self, logical: int) -> int:
        """Where logical block `logical` is in `block_ids`; ValueError if it was dropped."""
        if logical < self.num_sinks:
            return logical
        if logical < self.num_sinks + self.num_dropped:
            raise ValueError(f"logical block {logical} was dropped")
        return logical - self.num_dropped

    def live_blocks(self, num_logical: int) -> tuple[list[int], list[int]]:
        """The live blocks among logical blocks [0, num_logical), and the logical index of each."""
        if num_logical <= self.num_sinks or not self.num_dropped:
            return self.block_ids[:num_logical], list(range(num_logical))
        count = num_logical - self.num_dropped
        return self.block_ids[:count], [*range(self.num_sinks), *range(self.num_sinks + self.num_dropped, num_logical)]

    def drop(self, num_sinks: int, stop: int) -> list[int]:
        """Drop the live logical blocks in [num_sinks, stop) and return their ids (for the pool to release).

        ValueError (nothing changed) if earlier drops kept another number of sink blocks.
        """
        if self.num_dropped and num_sinks != self.num_sinks:
            raise ValueError(f"blocks were dropped after {self.num_sinks} sink blocks, not {num_sinks}")
        count = stop - num_sinks - self.num_dropped
        if count <= 0:
            return []
        freed = self.block_ids[num_sinks : num_sinks + count]
        del self.block_ids[num_sinks : num_sinks + count]
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
        self.num_sinks = len(self.block_ids)
        self.num_dropped = num_tokens // block_size - self.num_sinks
        self.num_tokens = num_tokens
