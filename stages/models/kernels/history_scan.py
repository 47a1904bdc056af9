"""A history branch's scan and reads in C (history_scan.c), built on first use (kernels/build).

In torch a step's scan is a dozen small calls per absorbed position and layer (the state's exp, its
update, each read's gather): on tiny-omni's thinker with 48 streams they cost more than a third of
the step. The kernel makes one pass over each sequence's state, a sequence per torch thread. Without
a compiler, `load` returns None and the branch scans in torch.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from stages.models.kernels.build import load_library

SOURCE = Path(__file__).with_name("history_scan.c")


class HistoryScan:
    """The loaded kernel. Contract of `__call__`: float32 caches [blocks, block_size, kv_heads, dim],
    contiguous; `state_k`/`state_v` int64 [seqs, rows] (the state's flat rows in each cache);
    `dt`, `du` [seqs, steps, width], `b` [seqs, steps, state_size], `a` [state_size, width] and `c`
    [queries, state_size] float32; `query_start` int64 [seqs + 1] and `absorbed` int64 [queries] (each
    sequence's queries in a row, in order of the state they read). Returns the reads [queries, width]
    and leaves each sequence's last state in its rows. Runs on `torch.get_num_threads()` threads."""

    def __init__(self, library: ctypes.CDLL) -> None:
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self._scan = library.history_scan
        self._scan.restype = ctypes.c_int
        self._scan.argtypes = [ptr, ptr, i64, ptr, i64, ptr, i64, ptr, ptr, ptr, i64, ptr, ptr, ptr, ptr, i64, i64,
                               ptr]

    def __call__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, state_k: torch.Tensor, state_v: torch.Tensor,
                 dt: torch.Tensor, b: torch.Tensor, du: torch.Tensor, a: torch.Tensor, c: torch.Tensor,
                 query_start: torch.Tensor, absorbed: torch.Tensor) -> torch.Tensor:
        if k_cache.dtype != torch.float32 or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            raise ValueError("the history scan kernel takes contiguous float32 caches")
        dt, b, du, a, c = (t.contiguous() for t in (dt, b, du, a, c))
        width, (num_seqs, steps) = k_cache.shape[2] * k_cache.shape[3], dt.shape[:2]
        read = torch.empty(len(c), width)
        status = self._scan(k_cache.data_ptr(), v_cache.data_ptr(), width, state_k.data_ptr(), state_k.shape[1],
                            state_v.data_ptr(), a.shape[0], dt.data_ptr(), b.data_ptr(), du.data_ptr(), steps,
                            a.data_ptr(), c.data_ptr(), query_start.data_ptr(), absorbed.data_ptr(), num_seqs,
                            torch.get_num_threads(), read.data_ptr())
        if status != 0:
            raise MemoryError("the history scan could not allocate a state buffer")
        return read


def load() -> HistoryScan | None:
    """The kernel, compiled if this source and these flags have not been yet; None without a compiler."""
    library = load_library(SOURCE, "the history branch scans in torch (slower)")
    return None if library is None else HistoryScan(library)
