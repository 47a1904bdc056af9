"""One sequence's KV across the device and host tiers."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field

from kvtier.block_table import BlockTable
from kvtier.eviction.policy import UsageHint
from kvtier.transfer_job import TransferJob


@dataclass(eq=False)
class SequenceKV:
    """Where one sequence's blocks are, and what the scheduler said about it.

    Live blocks 0..n-1 (its state blocks and the position blocks a window has not
    dropped, see BlockTable): the first `len(table.block_ids)` are on the device, the
    last `num_offloaded` only on the host. `host_ids` are valid host copies of live
    blocks 0..len-1, always a prefix; while any block is offloaded every live block
    has one. `job` is the
    one transfer in flight, which pins the sequence. `is_evictable`, `hint` and
    `protected_until` are scheduler hints; `preload_until` is when a preload in
    flight expects the sequence to be used, and `is_warm` marks a completed preload
    not used yet. Compared by identity (`serial` orders equal keys in heaps).
    """

    seq: Hashable
    serial: int
    table: BlockTable = field(default_factory=BlockTable)
    host_ids: list[int] = field(default_factory=list)
    num_offloaded: int = 0
    job: TransferJob | None = None
    is_evictable: bool = False
    hint: UsageHint = field(default_factory=UsageHint)
    protected_until: float = -math.inf
    preload_until: float | None = None
    is_warm: bool = False
