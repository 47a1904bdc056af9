"""Paged KV storage: block pools, block tables, KV tensors, a host tier with transfers, eviction and preload
(a leaf package)."""

from kvtier.block_pool import BlockPool, OutOfBlocks
from kvtier.block_table import BlockTable
from kvtier.config import HostTierConfig, KVPoolConfig
from kvtier.eviction import EVICTION_POLICIES, EvictionPolicy, UsageHint
from kvtier.kv_cache import KVCache
from kvtier.kv_manager import KVCacheManager, blocks_for
from kvtier.registry import Registry
from kvtier.transfer_job import TransferDone

__all__ = ["EVICTION_POLICIES", "BlockPool", "BlockTable", "EvictionPolicy", "HostTierConfig", "KVCache",
           "KVCacheManager", "KVPoolConfig", "OutOfBlocks", "Registry", "TransferDone", "UsageHint", "blocks_for"]
