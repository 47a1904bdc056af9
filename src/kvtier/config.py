"""Frozen configuration of a paged KV pool."""

from __future__ import annotations

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
