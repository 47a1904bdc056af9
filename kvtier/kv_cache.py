"""The KV tensors of one tier: per layer, K and V indexed by [block, offset, head, dim]."""

from __future__ import annotations

import torch

from kvtier.config import KVPoolConfig


class KVCache:
    """Per-layer K and V storage of shape [num_blocks, block_size, num_kv_heads, head_dim].

    The cache only stores bytes; which block belongs to whom is the manager's business.
    `pin_memory` page-locks host tensors (for fast copies to and from a GPU).
    """

    def __init__(self, config: KVPoolConfig, pin_memory: bool = False) -> None:
        shape = (config.num_blocks, config.block_size, config.num_kv_heads, config.head_dim)
        make = lambda: torch.zeros(shape, dtype=config.torch_dtype, device=config.device,  # noqa: E731
                                   pin_memory=pin_memory)
        self.config = config
        self.keys = [make() for _ in range(config.num_layers)]
        self.values = [make() for _ in range(config.num_layers)]

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[index], self.values[index]

    @property
    def num_bytes(self) -> int:
        return self.config.num_blocks * self.config.bytes_per_block
