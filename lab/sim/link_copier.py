"""A host link that moves no bytes: a copy takes the time its bytes need at the link's rate."""

from __future__ import annotations

from kvtier.block_copier import BlockCopier


class LinkCopier(BlockCopier):
    """For a simulated KV pool (meta tensors): `copy` returns bytes x 8 / `gbps` seconds and copies nothing;
    the link measures as its rate. The simulation's clock, not this call, lets that time pass."""

    def copy(self, kind: str, src_ids: list[int], dst_ids: list[int]) -> float:
        return self.seconds(len(src_ids))

    def seconds(self, num_blocks: int) -> float:
        return num_blocks * self.bytes_per_block * 8 / (self.gbps * 1e9)

    def measure_gbps(self, num_blocks: int) -> float:
        return self.gbps
