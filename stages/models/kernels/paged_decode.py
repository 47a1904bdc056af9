"""Decode attention over paged KV in place: a C kernel (paged_decode.c), compiled on first use.

Torch has no CPU op that reads paged KV where it lies, so decoding otherwise gathers
every sequence's blocks into a fresh tensor per layer and reads it again: on
talker shapes the gathers cost more than the products. The kernel reads each
position's K and V once from the cache. It is compiled with the machine's C
compiler (-march=native: built where it runs) into a per-user cache, keyed by the
source, the flags and the CPU's features, and loaded with ctypes, which releases
the interpreter lock while it runs. Built with OpenMP where the compiler has it, it
shares the rows (or, with fewer rows than threads, the (row, KV head) pairs) among the
calling thread's torch threads (the stage's `threads`), as torch's own ops do; without,
it runs on one. Without a compiler, `load` returns None and attention gathers.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("paged_decode.c")
# -ffast-math's parts, not the flag: with it gcc links crtfastmath.o, which flushes denormals to zero in
# the whole process that loads the library (every torch op, not just this kernel).
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fno-signed-zeros", "-fassociative-math",
         "-freciprocal-math", "-ffinite-math-only", "-fPIC", "-shared")
OPENMP = "-fopenmp"  # dropped if the compiler cannot build with it
CACHE_DIR = Path.home() / ".cache" / "liveserve" / "kernels"


class PagedDecode:
    """The loaded kernel. Contract of `__call__`: float32 contiguous q [rows, heads, dim] and caches
    [blocks, block_size, kv_heads, dim]; `block_table` int64 [rows, width] and `lengths` int64 [rows]
    contiguous, every length >= 1 and within its row's blocks. Returns [rows, heads, dim]. Runs on the
    calling thread's torch thread count (`torch.get_num_threads()`)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._fn = library.paged_decode
        self._fn.restype = ctypes.c_int
        sizes = [ctypes.c_int64] * 6
        self._fn.argtypes = [ctypes.c_void_p] * 5 + sizes + [ctypes.c_float, ctypes.c_int64, ctypes.c_void_p]

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 lengths: torch.Tensor) -> torch.Tensor:
        if not q.dtype == k_cache.dtype == v_cache.dtype == torch.float32:
            raise TypeError(f"paged decode attention takes float32, got {q.dtype} and a {k_cache.dtype} cache")
        q = q.contiguous()
        rows, heads, dim = q.shape
        out = torch.empty_like(q)
        status = self._fn(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), block_table.data_ptr(),
                          lengths.data_ptr(), rows, block_table.shape[1], heads, k_cache.shape[2], dim,
                          k_cache.shape[1], dim**-0.5, torch.get_num_threads(), out.data_ptr())
        if status != 0:
            raise MemoryError("paged decode attention could not allocate its score buffer")
        return out


@functools.cache
def load() -> PagedDecode | None:
    """The kernel, compiled if this source and these flags have not been yet; None without a compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler found: decode attention gathers KV blocks (slower)")
        return None
    identity = " ".join((compiler, *FLAGS, OPENMP, _cpu_features())).encode()
    key = hashlib.sha256(SOURCE.read_bytes() + identity).hexdigest()[:16]
    library = CACHE_DIR / f"paged_decode-{key}.so"
    if not library.exists():
        try:
            _compile(compiler, library)
        except (OSError, subprocess.CalledProcessError) as exc:
            log.warning("compiling %s failed (%s): decode attention gathers KV blocks (slower)", SOURCE.name, exc)
            return None
    return PagedDecode(ctypes.CDLL(str(library)))


def _cpu_features() -> str:
    """What -march=native builds for: a library built on another CPU (a shared home) is not reused."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith("flags")), platform.machine())
    except OSError:
        return platform.machine()


def _compile(compiler: str, library: Path) -> None:
    """Build into a temporary file, then rename: processes compiling at once never load half a file."""
    library.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(suffix=".so", dir=library.parent)
    os.close(handle)
    try:
        try:
            _build(compiler, [*FLAGS, OPENMP], partial)
        except subprocess.CalledProcessError:
            log.warning("%s does not build with %s: decode attention runs on one thread", compiler, OPENMP)
            _build(compiler, list(FLAGS), partial)
        os.replace(partial, library)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _build(compiler: str, flags: list[str], output: str) -> None:
    subprocess.run([compiler, *flags, "-o", output, str(SOURCE), "-lm"], check=True, capture_output=True, timeout=120)
