"""The device-only tier: a KVTier that answers as a tier with nothing offloaded, so a manager without a host
tier needs no checks for one."""

import math
from collections import Counter

from kvtier import HostTierConfig, KVCacheManager, KVPoolConfig
from kvtier.device_only_tier import DeviceOnlyTier
from kvtier.offloader import Offloader
from kvtier.sequence_kv import SequenceKV
from kvtier.tier import KVTier
from kvtier.tier_stats import TierStats

POOL = KVPoolConfig(num_blocks=6, num_layers=1, num_kv_heads=1, head_dim=2, block_size=4)


def test_it_is_a_kv_tier_and_answers_nothing_offloaded():
    tier, state = DeviceOnlyTier(), SequenceKV("a", serial=1)
    assert isinstance(tier, KVTier) and not DeviceOnlyTier.__abstractmethods__  # every call of the contract answered
    for call in (tier.refresh, tier.touch, tier.forget, tier.store):
        call(state)
    tier.set_evictable(state, True)
    tier.invalidate(state, 0)
    assert vars(state) == vars(SequenceKV("a", serial=1))  # untouched
    assert tier.evict(0) and not tier.evict(1, loader=state) and tier.num_evictable_blocks() == 0
    assert tier.evict_beyond(-math.inf) == 0
    assert tier.load(state, background=False) and tier.load(state, background=True)
    assert tier.preload(state, 1.0) == tier.preload(None, 1.0) == "resident" and not tier.cancel_load(state)
    assert tier.poll() == [] and not tier.wait_for_transfer(0.0) and not tier.has_transfers_in_flight
    assert tier.worker is None and tier.link_gbps is None and tier.stats == TierStats().as_dict()
    assert set(tier.stats.values()) == {0}
    assert tier.check_integrity([state]) == Counter()
    tier.dropped(state, 0, 1)
    assert vars(state) == vars(SequenceKV("a", serial=1))
    tier.close()


def test_a_manager_picks_the_tier_by_its_eviction_policy():
    assert isinstance(KVCacheManager(POOL).tier, DeviceOnlyTier)
    tiered = KVCacheManager(POOL, HostTierConfig(num_blocks=8), "lru", transfer_mode="inline")
    assert isinstance(tiered.tier, Offloader)
    tiered.tier.close()


def test_hints_and_transfers_leave_a_device_only_managers_blocks_as_they_were():
    kv = KVCacheManager(POOL)
    kv.reserve("a", 9)
    kv.reserve("b", 4)

    def blocks():
        return [(list(kv.table(seq).block_ids), kv.table(seq).num_tokens) for seq in "ab"], kv.num_free_blocks

    before = blocks()
    for seq in ("a", "b", "unknown"):
        kv.set_evictable(seq, True)
        kv.set_next_use(seq, 5.0)
        kv.protect(seq, 5.0)
        kv.store(seq)
        assert kv.load(seq) and kv.load(seq, background=True) and kv.preload(seq, 0.5) == "resident"
        assert not kv.cancel_load(seq) and kv.is_resident(seq) and kv.num_offloaded_blocks(seq) == 0
    kv.reserve("a", 9)  # marked evictable, used again: nothing to re-file
    assert kv.tier.evict_beyond(0.0) == 0 and not kv.tier.evict(1) and kv.tier.poll() == []
    assert blocks() == before and kv.num_blocks_held("unknown") == 0
    kv.check_integrity()
