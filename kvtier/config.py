"""Frozen configuration of a paged KV pool and of the host tier behind it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class KVPoolConfig:
    """Shape of one stage's KV pool: `num_blocks` blocks of `block_size` tokens, every layer."""

    num_blocks: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int = 16
    dtype: str = "float32"
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("num_blocks", "num_layers", "num_kv_heads", "head_dim", "block_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def bytes_per_block(self) -> int:
        """Bytes of K and V for one block across all layers."""
        elem = torch.tensor([], dtype=self.torch_dtype).element_size()
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * self.head_dim * elem


@dataclass(frozen=True)
class HostTierConfig:
    """A host (CPU RAM) tier behind a device pool: `num_blocks` blocks of the device's block shape.

    `emulated_link_gbps`: if set, every copy between the tiers is paced to take at
    least bytes*8/(gbps*1e9) seconds, as over a link of that many gigabits per second
    (400 is about a PCIe 5 x16 link); None copies at memory speed. `warm_protect_s`:
    the longest a completed preload keeps its sequence from eviction. `chunk_blocks`:
    blocks per worker step; between steps a foreground load overtakes other work.
    """

    num_blocks: int
    emulated_link_gbps: float | None = None
    warm_protect_s: float = 5.0
    chunk_blocks: int = 16

    def __post_init__(self) -> None:
        for name in ("num_blocks", "chunk_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        gbps = self.emulated_link_gbps
        if gbps is not None and not (_is_number(gbps) and math.isfinite(gbps) and gbps > 0):
            raise ValueError(f"emulated_link_gbps must be None or a finite number > 0, got {gbps!r}")
        if not (_is_number(self.warm_protect_s) and math.isfinite(self.warm_protect_s) and self.warm_protect_s >= 0):
            raise ValueError(f"warm_protect_s must be a finite number >= 0, got {self.warm_protect_s!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
