"""One sequence's mapping from logical block index to physical block id."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BlockTable:
    """Logical blocks of one sequence, in position order; `num_tokens` slots are written.

    Token position p lives in block `block_ids[p // block_size]` at offset
    `p % block_size`.
    """

    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0

    @property
    def num_blocks(self) -> int:
        return len(self.block_ids)
