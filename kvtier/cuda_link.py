"""Block copies between a GPU's KV cache and its pinned host cache, on a CUDA stream of their own."""

from __future__ import annotations

import torch

from kvtier.kv_cache import KVCache


class CudaLink:
    """Copies blocks of every layer's K and V in one DMA each way per call, on a side stream.

    A load gathers the host blocks into pinned staging on the CPU, copies the staging to the GPU,
    and scatters it into the device cache there once the steps queued before it are done (they may still
    read the blocks it overwrites, freed since). A store first waits for the work queued on the
    device's default stream (the steps that wrote the blocks), gathers the device blocks on the GPU,
    copies them to pinned staging, and scatters them into the host cache on the CPU. Either waits for
    its copy's event on the calling thread (the transfer worker's), so compute queued on the default
    stream meanwhile runs alongside: a preload overlaps the steps.
    """

    def __init__(self, device: KVCache, host: KVCache) -> None:
        self.device, self.host = device, host
        self.gpu = device.keys[0].device
        self.stream = torch.cuda.Stream(self.gpu)
        self._pinned = torch.empty(0, dtype=device.keys[0].dtype, pin_memory=True)
        self._on_gpu = torch.empty(0, dtype=device.keys[0].dtype, device=self.gpu)

    def load(self, src_ids: list[int], dst_ids: list[int]) -> None:
        pinned, on_gpu = self._staging(len(src_ids))
        src = torch.tensor(src_ids)
        for tensor, staged in zip(self._tensors(self.host), pinned):
            torch.index_select(tensor, 0, src, out=staged)
        with torch.cuda.stream(self.stream):
            on_gpu.copy_(pinned, non_blocking=True)
            dst = torch.tensor(dst_ids).to(self.gpu, non_blocking=True)
            self.stream.wait_stream(torch.cuda.default_stream(self.gpu))  # steps still reading freed blocks
            for tensor, staged in zip(self._tensors(self.device), on_gpu):
                tensor.index_copy_(0, dst, staged)
            self._wait()

    def store(self, src_ids: list[int], dst_ids: list[int]) -> None:
        pinned, on_gpu = self._staging(len(src_ids))
        self.stream.wait_stream(torch.cuda.default_stream(self.gpu))
        with torch.cuda.stream(self.stream):
            src = torch.tensor(src_ids).to(self.gpu, non_blocking=True)
            for tensor, staged in zip(self._tensors(self.device), on_gpu):
                torch.index_select(tensor, 0, src, out=staged)
            pinned.copy_(on_gpu, non_blocking=True)
            self._wait()
        dst = torch.tensor(dst_ids)
        for tensor, staged in zip(self._tensors(self.host), pinned):
            tensor.index_copy_(0, dst, staged)

    def _wait(self) -> None:
        done = torch.cuda.Event()
        done.record(self.stream)
        done.synchronize()

    def _staging(self, num_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[tensors, num_blocks, *block] in pinned host memory and on the GPU, grown when too small."""
        keys = self.device.keys[0]
        shape = (2 * len(self.device.keys), num_blocks, *keys.shape[1:])
        if self._pinned.numel() < _numel(shape):
            self._pinned = torch.empty(shape, dtype=keys.dtype, pin_memory=True)
            self._on_gpu = torch.empty(shape, dtype=keys.dtype, device=self.gpu)
        return self._pinned.view(-1)[: _numel(shape)].view(shape), self._on_gpu.view(-1)[: _numel(shape)].view(shape)

    @staticmethod
    def _tensors(cache: KVCache) -> list[torch.Tensor]:
        return cache.keys + cache.values


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
