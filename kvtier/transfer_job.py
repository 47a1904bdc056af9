"""A copy of some of one sequence's blocks between the tiers, and its report."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple

LOAD, STORE = "load", "store"


@dataclass(eq=False)
class TransferJob:
    """Blocks of one sequence to copy: prepared and completed on the engine thread, run by the worker.

    `src_ids[i]` is copied into `dst_ids[i]` (a load copies host -> device, a store
    device -> host); they hold live blocks `first_block + i` (see SequenceKV). The job holds one
    reference on each of these blocks from prepare to complete, so none is reused
    while a copy into or out of it may run. `num_kept` is how many leading blocks
    are still wanted at completion (writes and truncation lower it). The worker
    advances `num_copied` and `seconds` and sets `is_running`/`is_finished` under its
    lock; `cancelled` stops the job at the next chunk.
    """

    seq: Hashable
    kind: str
    background: bool
    src_ids: list[int]
    dst_ids: list[int]
    first_block: int
    num_kept: int = field(init=False)
    is_preload: bool = False
    num_copied: int = 0
    seconds: float = 0.0
    is_running: bool = False
    is_finished: bool = False
    cancelled: bool = False

    def __post_init__(self) -> None:
        self.num_kept = len(self.src_ids)

    @property
    def num_blocks(self) -> int:
        return len(self.src_ids)

    @property
    def priority(self) -> int:
        """0 foreground load, 1 background load, 2 store: the worker serves lower first."""
        return 2 if self.kind == STORE else int(self.background)

    @property
    def device_ids(self) -> list[int]:
        return self.dst_ids if self.kind == LOAD else self.src_ids

    @property
    def host_ids(self) -> list[int]:
        return self.src_ids if self.kind == LOAD else self.dst_ids

    def keep_below(self, block: int) -> None:
        """Live blocks from `block` on are no longer wanted."""
        self.num_kept = max(0, min(self.num_kept, block - self.first_block))


class TransferDone(NamedTuple):
    """A transfer `poll` completed: blocks and bytes actually copied, copy time including pacing."""

    seq: Hashable
    kind: str
    background: bool
    num_blocks: int
    num_bytes: int
    seconds: float
    cancelled: bool
