"""Paged KV storage: block pool, block tables, KV tensors (a leaf package)."""

from kvtier.block_pool import BlockPool, OutOfBlocks
from kvtier.block_table import BlockTable
from kvtier.config import KVPoolConfig
from kvtier.kv_cache import KVCache
from kvtier.kv_manager import KVCacheManager, blocks_for

__all__ = ["BlockPool", "BlockTable", "KVCache", "KVCacheManager", "KVPoolConfig", "OutOfBlocks", "blocks_for"]
