"""Builds a kernel's C source with the machine's compiler on first use and loads it with ctypes.

Compiled with -march=native (built where it runs) into a per-user cache, keyed by the source,
the headers beside it, the flags and the CPU's features; ctypes releases the interpreter lock
while a kernel runs. Built with OpenMP where the compiler has it, a kernel can share its work
among the calling thread's torch threads; the library then reuses the OpenMP runtime torch has
loaded (same soname), so the kernels and torch's ops share one thread pool.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)
# -ffast-math's parts, not the flag: with it gcc links crtfastmath.o, which flushes denormals to zero in
# the whole process that loads the library (every torch op, not just the kernels).
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fno-signed-zeros", "-fassociative-math",
         "-freciprocal-math", "-ffinite-math-only", "-fPIC", "-shared")
OPENMP = "-fopenmp"  # dropped if the compiler cannot build with it
CACHE_DIR = Path.home() / ".cache" / "liveserve" / "kernels"


def load_library(source: Path, fallback: str) -> ctypes.CDLL | None:
    """`source` compiled, if this source, its headers and these flags have not been yet; None without a
    compiler or when the build fails, with a warning naming `fallback` (what runs instead)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler found: %s", fallback)
        return None
    identity = " ".join((compiler, *FLAGS, OPENMP, _cpu_features())).encode()
    headers = b"".join(header.read_bytes() for header in sorted(source.parent.glob("*.h")))
    key = hashlib.sha256(source.read_bytes() + headers + identity).hexdigest()[:16]
    library = CACHE_DIR / f"{source.stem}-{key}.so"
    if not library.exists():
        try:
            _compile(compiler, source, library)
        except (OSError, subprocess.CalledProcessError) as exc:
            log.warning("compiling %s failed (%s): %s", source.name, exc, fallback)
            return None
    return ctypes.CDLL(str(library))


def _cpu_features() -> str:
    """What -march=native builds for: a library built on another CPU (a shared home) is not reused."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith("flags")), platform.machine())
    except OSError:
        return platform.machine()


def _compile(compiler: str, source: Path, library: Path) -> None:
    """Build into a temporary file, then rename: processes compiling at once never load half a file."""
    library.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(suffix=".so", dir=library.parent)
    os.close(handle)
    try:
        try:
            _build(compiler, source, [*FLAGS, OPENMP], partial)
        except subprocess.CalledProcessError:
            log.warning("%s does not build with %s: %s runs on one thread", compiler, OPENMP, source.name)
            _build(compiler, source, list(FLAGS), partial)
        os.replace(partial, library)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _build(compiler: str, source: Path, flags: list[str], output: str) -> None:
    subprocess.run([compiler, *flags, "-o", output, str(source), "-lm"], check=True, capture_output=True, timeout=120)
