"""Host memory behind a device KV pool, and the host copies it may drop for room."""

from __future__ import annotations

from dataclasses import replace

from kvtier.block_pool import BlockPool
from kvtier.config import HostTierConfig, KVPoolConfig
from kvtier.kv_cache import KVCache
from kvtier.sequence_kv import SequenceKV
from kvtier.victim_heap import VictimHeap


class HostTier:
    """A block pool and KV tensors in host RAM with the device's block shape (pinned when the device is CUDA).

    Droppable copies: a fully resident, unpinned sequence's host copies all duplicate
    its device blocks, so they may go. `file(state, n)` keeps each sequence's
    droppable count current (0: none), keyed least recently used first.
    `make_room(n, state)` drops such copies, each sequence's suffix first, until n
    blocks are free, never `state`'s own, or drops nothing and returns None.
    """

    def __init__(self, device: KVPoolConfig, config: HostTierConfig) -> None:
        self.config = config
        self.pool = BlockPool(config.num_blocks)
        where = "meta" if device.device == "meta" else "cpu"  # a meta pool (shapes, no bytes) has a meta host tier
        self.cache = KVCache(replace(device, num_blocks=config.num_blocks, device=where),
                             pin_memory=device.device.startswith("cuda"))
        self.droppable: VictimHeap[SequenceKV] = VictimHeap()

    def file(self, state: SequenceKV, num_droppable: int) -> None:
        self.droppable.put(state, (state.hint.last_used, state.serial), num_droppable)

    def make_room(self, num_blocks: int, state: SequenceKV) -> list[SequenceKV] | None:
        """The sequences whose copies were dropped to free `num_blocks` (re-file them), or None: nothing dropped."""
        short = num_blocks - self.pool.num_free
        if short <= 0:
            return []
        offered = self.droppable.offered(state)
        self.droppable.discard(state)
        victims = self.droppable.take(short)
        if victims is None:
            self.file(state, offered)
            return None
        for victim, count in victims:
            self.pool.release(victim.host_ids[-count:])
            del victim.host_ids[-count:]
        return [victim for victim, _ in victims]
