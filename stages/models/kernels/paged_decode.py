"""Decode attention over paged KV in place: a C kernel (paged_decode.c), built on first use (kernels/build).

Torch has no CPU op that reads paged KV where it lies, so decoding otherwise gathers
every sequence's blocks into a fresh tensor per layer and reads it again: on
talker shapes the gathers cost more than the products. The kernel reads each
position's K and V once from the cache. Built with OpenMP where the compiler has it,
it shares the rows (or, with fewer rows than threads, the (row, KV head) pairs) among
the calling thread's torch threads (the stage's `threads`), as torch's own ops do;
without, it runs on one. Without a compiler, `load` returns None and attention gathers.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from stages.models.kernels.build import load_library
from stages.models.kernels.layer_ops import contiguous_rows

SOURCE = Path(__file__).with_name("paged_decode.c")


class PagedDecode:
    """The loaded kernel. Contract of `__call__`: float32 q [rows, heads, dim] (rows may be strided, as a
    fused projection's columns are) and caches [blocks, block_size, kv_heads, dim], contiguous;
    `block_table` int64 [rows, width] and `lengths` int64 [rows] contiguous, every length >= 1 and within
    its row's blocks. Returns [rows, heads, dim] (in `out` when given, contiguous). Runs on the calling
    thread's torch thread count (`torch.get_num_threads()`). `write` puts new K and V in their slots."""

    def __init__(self, library: ctypes.CDLL) -> None:
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self._decode, self._write = library.paged_decode, library.write_slots
        self._decode.restype, self._write.restype = ctypes.c_int, None
        self._decode.argtypes = [ptr, i64, ptr, ptr, ptr, ptr] + [i64] * 6 + [ctypes.c_float, i64, ptr]
        self._write.argtypes = [ptr, i64, ptr, i64, ptr, i64, i64, ptr, ptr]

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 lengths: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        _check_float32(q, k_cache)
        rows, heads, dim = q.shape
        q = contiguous_rows(q)
        out = torch.empty(q.shape, dtype=q.dtype) if out is None else out
        status = self._decode(q.data_ptr(), q.stride(0), k_cache.data_ptr(), v_cache.data_ptr(),
                              block_table.data_ptr(), lengths.data_ptr(), rows, block_table.shape[1], heads,
                              k_cache.shape[2], dim, k_cache.shape[1], dim**-0.5, torch.get_num_threads(),
                              out.data_ptr())
        if status != 0:
            raise MemoryError("paged decode attention could not allocate its score buffer")
        return out

    def write(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slots: torch.Tensor) -> None:
        """k, v [rows, kv_heads, dim] (rows may be strided) into the caches' flat slots (int64 [rows])."""
        _check_float32(k, k_cache)
        k, v = contiguous_rows(k), contiguous_rows(v)
        self._write(k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), slots.data_ptr(), k.shape[0],
                    k.shape[1] * k.shape[2], k_cache.data_ptr(), v_cache.data_ptr())


def _check_float32(x: torch.Tensor, cache: torch.Tensor) -> None:
    if not x.dtype == cache.dtype == torch.float32:
        raise TypeError(f"paged decode attention takes float32, got {x.dtype} and a {cache.dtype} cache")


@functools.cache
def load() -> PagedDecode | None:
    """The kernel, compiled if this source and these flags have not been yet; None without a compiler."""
    library = load_library(SOURCE, "decode attention gathers KV blocks (slower)")
    return None if library is None else PagedDecode(library)
