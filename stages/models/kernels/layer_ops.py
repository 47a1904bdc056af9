"""A decoder layer's element-wise steps (RMS norm, rotary embedding, SwiGLU's product): in torch ops, or
in one C pass each (layer_ops.c, built on first use by kernels/build).

At a decode step's few rows, torch's CPU ops cost their dispatch more than their arithmetic: the C
versions take a tiny-omni thinker step's nine norms, eight rotations and four products from many
dispatches to one call each. Models compute with `TORCH_OPS` until given others; the C ones take
float32 on the CPU only.
"""

from __future__ import annotations

import ctypes
import functools
from abc import ABC, abstractmethod
from pathlib import Path

import torch
import torch.nn.functional as F

from stages.models.kernels.build import load_library

SOURCE = Path(__file__).with_name("layer_ops.c")


class LayerOps(ABC):
    """Contract: each step returns what its torch formula gives, up to float rounding. `rotate` may
    overwrite `x` (a fresh projection) and returns the rotated tensor."""

    @abstractmethod
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x / sqrt(mean(x^2 over the last dimension) + eps) * weight."""

    @abstractmethod
    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [rows, heads, dim] by each row's angles (cos, sin [rows, 1, dim], halves equal):
        x * cos + (-x[..., dim/2:], x[..., :dim/2]) * sin."""

    @abstractmethod
    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up, both [rows, size]."""


class TorchLayerOps(LayerOps):
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


class CLayerOps(LayerOps):
    """The C steps, on the calling thread's torch thread count. Rows may be strided (a fused
    projection's columns); anything else not laid out as the C loops read it is copied first."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._rms_norm, self._rotate, self._silu_mul = library.rms_norm, library.rotate, library.silu_mul
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self._rms_norm.argtypes = [ptr, i64, ptr, i64, i64, ctypes.c_float, i64, ptr]
        self._rotate.argtypes = [ptr, i64, i64, i64, i64, ptr, ptr, i64]
        self._silu_mul.argtypes = [ptr, ptr, i64, i64, i64, i64, ptr]
        for fn in (self._rms_norm, self._rotate, self._silu_mul):
            fn.restype = None

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows = _float32(contiguous_rows(x.reshape(-1, x.shape[-1])))
        weight = _float32(weight).contiguous()
        out = torch.empty(x.shape, dtype=x.dtype)
        self._rms_norm(rows.data_ptr(), rows.stride(0), weight.data_ptr(), rows.shape[0], rows.shape[1], eps,
                       torch.get_num_threads(), out.data_ptr())
        return out

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        rows, heads, dim = x.shape
        x = contiguous_rows(x)
        if cos.numel() != rows * dim or sin.numel() != rows * dim:
            raise ValueError(f"rotating {rows} rows of {dim} needs angles [{rows}, 1, {dim}], got {tuple(cos.shape)}")
        cos, sin = _float32(cos).contiguous(), _float32(sin).contiguous()
        self._rotate(_float32(x).data_ptr(), x.stride(0), rows, heads, dim, cos.data_ptr(), sin.data_ptr(),
                     torch.get_num_threads())
        return x

    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate, up = _float32(contiguous_rows(gate)), _float32(contiguous_rows(up))
        if gate.stride(0) != up.stride(0):
            gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty(gate.shape, dtype=gate.dtype)
        self._silu_mul(gate.data_ptr(), up.data_ptr(), gate.stride(0), gate.shape[0], gate.shape[1],
                       torch.get_num_threads(), out.data_ptr())
        return out


def _float32(x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float32 or x.device.type != "cpu":
        raise TypeError(f"the C layer ops take float32 on the CPU, got {x.dtype} on {x.device}")
    return x


def contiguous_rows(x: torch.Tensor) -> torch.Tensor:
    """x with each row (all but the first dimension) contiguous, rows any stride apart: as it is when so
    (a fused projection's columns), else copied."""
    expected = 1
    for size, stride in zip(reversed(x.shape[1:]), reversed(x.stride()[1:])):
        if size != 1 and stride != expected:
            return x.contiguous()
        expected *= size
    return x


TORCH_OPS = TorchLayerOps()


@functools.cache
def load() -> LayerOps:
    """The C steps where a compiler builds them, else torch's."""
    library = load_library(SOURCE, "decoder layers' element-wise steps run as torch ops (slower)")
    return TORCH_OPS if library is None else CLayerOps(library)
