"""Copies blocks between the device cache and the host cache, optionally paced to a link rate."""

from __future__ import annotations

import time

import torch

from kvtier.cuda_link import CudaLink
from kvtier.kv_cache import KVCache
from kvtier.transfer_job import LOAD, STORE


class BlockCopier:
    """Moves block contents between the two tiers' caches, every layer's K and V.

    With `gbps` set, copying b bytes takes at least b*8/(gbps*1e9) seconds (the copy
    sleeps out the rest), as over a link of that rate; None copies at memory speed.
    A device cache on CUDA copies over its CudaLink (a side stream, pinned staging); the copy
    has finished when `copy` returns.
    """

    def __init__(self, device: KVCache, host: KVCache, gbps: float | None) -> None:
        self.device, self.host, self.gbps = device, host, gbps
        self.bytes_per_block = device.config.bytes_per_block
        self._link = CudaLink(device, host) if device.keys[0].is_cuda else None

    def copy(self, kind: str, src_ids: list[int], dst_ids: list[int]) -> float:
        """Copy block src_ids[i] into dst_ids[i] (load: host -> device, store: device -> host); seconds taken."""
        started = time.perf_counter()
        if self._link is not None:
            (self._link.load if kind == LOAD else self._link.store)(src_ids, dst_ids)
        else:
            src, dst = (self.host, self.device) if kind == LOAD else (self.device, self.host)
            self._copy(src, dst, src_ids, dst_ids)
        if self.gbps is not None:
            link_s = len(src_ids) * self.bytes_per_block * 8 / (self.gbps * 1e9)
            time.sleep(max(0.0, link_s - (time.perf_counter() - started)))
        return time.perf_counter() - started

    @staticmethod
    def _copy(src: KVCache, dst: KVCache, src_ids: list[int], dst_ids: list[int]) -> None:
        src_index = torch.tensor(src_ids, device=src.keys[0].device)
        dst_index = torch.tensor(dst_ids, device=dst.keys[0].device)
        for source, target in zip(src.keys + src.values, dst.keys + dst.values):
            target.index_copy_(0, dst_index, source.index_select(0, src_index))

    def measure_gbps(self, num_blocks: int) -> float:
        """Effective rate of a round trip of blocks 0..num_blocks-1, device -> host -> device, best of three.

        Only while those blocks are free in both tiers (at construction): it overwrites them.
        """
        ids = list(range(num_blocks))
        seconds = min(self.copy(STORE, ids, ids) + self.copy(LOAD, ids, ids) for _ in range(3))
        return 2 * num_blocks * self.bytes_per_block * 8 / seconds / 1e9
