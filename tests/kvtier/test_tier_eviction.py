"""Eviction to the host tier: candidates, atomicity, suffix-first, policy order, pins, room for loads
(just over 300 lines: one case per rule of eviction, sharing the tier harness)."""

import pytest

from kvtier import EVICTION_POLICIES, HostTierConfig, KVCacheManager, KVPoolConfig
from tests.kvtier.tier_harness import (
    BLOCK,
    POLICIES,
    FakeClock,
    GatedCopier,
    expected,
    grow,
    idle,
    idle_threaded,
    make_tiered,
    read,
    settle,
)


def snapshot(kv, seqs):
    return {s: (list(kv.table(s).block_ids), kv.num_offloaded_blocks(s)) for s in seqs}, kv.num_free_blocks


@pytest.mark.parametrize("policy", POLICIES)
def test_eviction_frees_exactly_what_is_asked_suffix_first_or_nothing(policy):
    kv = make_tiered(policy)
    idle(kv, "a", 6)  # 3 blocks, all backed on the host
    blocks = list(kv.table("a").block_ids)
    assert kv.tier.num_evictable_blocks() == 3 and kv.num_free_blocks == 5
    before = snapshot(kv, ["a"])
    assert not kv.tier.evict(4)  # more than can be had: nothing moves
    assert snapshot(kv, ["a"]) == before
    kv.check_integrity()
    assert kv.tier.evict(2)  # the last two blocks go; the first stays
    assert kv.table("a").block_ids == blocks[:1] and kv.num_offloaded_blocks("a") == 2
    assert kv.num_free_blocks == 7 and not kv.is_resident("a") and kv.tier.num_evictable_blocks() == 1
    kv.check_integrity()
    assert kv.tier.evict(0) and kv.tier.evict(1) and not kv.tier.evict(1)  # zero is always fine; then nothing is left
    assert kv.num_blocks_held("a") == 0 and kv.num_offloaded_blocks("a") == 3
    assert kv.table("a").num_tokens == 6  # the logical sequence is intact
    kv.check_integrity()
    assert kv.tier.stats["evictions"] == 3 and kv.tier.stats[f"evictions_{policy}"] == 3


@pytest.mark.parametrize("policy", POLICIES)
def test_only_idle_backed_unprotected_unpinned_sequences_are_candidates(policy):
    clock = FakeClock()
    kv = make_tiered(policy, num_blocks=12, host_blocks=12, clock=clock)
    idle(kv, "idle", 4)  # 2 blocks: a candidate
    idle(kv, "busy", 4)
    kv.set_evictable("busy", False)  # in use again: running KV is protected
    grow(kv, "unbacked", 4)
    kv.set_evictable("unbacked", True)  # idle, but no host copy yet
    idle(kv, "guarded", 4)
    kv.protect("guarded", 10.0)  # the user is speaking until t=10
    grow(kv, "storing", 4)
    kv.set_evictable("storing", True)
    kv.store("storing")  # its copy is in flight: pinned
    kv.check_integrity()
    assert kv.tier.num_evictable_blocks() == 2
    assert not kv.tier.evict(3)  # only "idle" may give blocks
    assert kv.tier.evict(2) and kv.num_blocks_held("idle") == 0
    for seq in ("busy", "unbacked", "guarded", "storing"):
        assert kv.num_blocks_held(seq) == 2
    kv.check_integrity()
    clock.t = 10.0  # the protection ends
    assert kv.tier.num_evictable_blocks() == 2
    settle(kv)  # the store completes: "storing" is backed and unpinned
    assert kv.tier.num_evictable_blocks() == 4
    kv.protect("guarded", 5.0)  # protections only extend: an earlier end changes nothing
    assert kv.tier.num_evictable_blocks() == 4
    kv.check_integrity()


@pytest.mark.parametrize("policy", POLICIES)
def test_lifting_protections_makes_protected_candidates_ready_now(policy):
    clock = FakeClock()
    kv = make_tiered(policy, num_blocks=12, host_blocks=12, clock=clock)
    idle(kv, "guarded", 4)
    kv.protect("guarded", 10.0)
    assert kv.tier.num_evictable_blocks() == 0 and kv.tier.lift_protections()
    assert kv.tier.num_evictable_blocks() == 2 and not kv.tier.lift_protections()  # nothing left to lift
    kv.check_integrity()
    assert kv.tier.evict(2) and kv.num_offloaded_blocks("guarded") == 2
    kv.check_integrity()


@pytest.mark.parametrize("policy", POLICIES)
def test_a_partly_unbacked_sequence_gives_nothing(policy):
    kv = make_tiered(policy)
    idle(kv, "a", 4)  # 2 blocks backed
    kv.set_evictable("a", False)
    grow(kv, "a", 6)  # a third block, not backed: the suffix cannot go, so nothing can
    kv.set_evictable("a", True)
    assert kv.tier.num_evictable_blocks() == 0 and not kv.tier.evict(1)
    kv.store("a")  # back up just the new block
    [done] = settle(kv)
    assert (done.kind, done.num_blocks) == ("store", 1)
    assert kv.tier.num_evictable_blocks() == 3
    kv.check_integrity()


def same_state(policy):
    """"old" was used first but is needed soon; "new" was used later but is needed late."""
    clock = FakeClock()
    kv = make_tiered(policy, clock=clock)
    idle(kv, "old", 4, next_use=5.0)  # used at t=0
    clock.t = 1.0
    idle(kv, "new", 4, next_use=50.0)  # used at t=1
    return kv


def test_lru_and_next_use_choose_different_victims():
    lru, next_use = same_state("lru"), same_state("next_use")
    assert lru.tier.evict(1) and next_use.tier.evict(1)
    assert (lru.num_blocks_held("old"), lru.num_blocks_held("new")) == (1, 2)  # least recently used
    assert (next_use.num_blocks_held("old"), next_use.num_blocks_held("new")) == (2, 1)  # needed farthest ahead
    lru.check_integrity()
    next_use.check_integrity()


def test_next_use_empties_the_farthest_then_takes_the_next_ones_suffix():
    kv = make_tiered("next_use")
    idle(kv, "near", 6, next_use=10.0)
    idle(kv, "far", 6, next_use=100.0)
    near = list(kv.table("near").block_ids)
    assert kv.tier.evict(4)  # all 3 of "far", then the last block of "near"
    assert kv.num_blocks_held("far") == 0 and kv.table("near").block_ids == near[:2]
    kv.check_integrity()


def test_evict_beyond_offloads_whatever_is_needed_after_the_horizon_and_nothing_else():
    kv = make_tiered("next_use", num_blocks=12, host_blocks=12)
    idle(kv, "soon", 4, next_use=2.0)
    idle(kv, "later", 4, next_use=8.0)
    idle(kv, "last", 6, next_use=30.0)
    kv.protect("last", until=1.0)  # waits out its protection first
    assert kv.tier.evict_beyond(5.0) == 2  # only "later": "last" is protected, "soon" is near
    assert kv.num_offloaded_blocks("later") == 2 and kv.is_resident("soon") and kv.is_resident("last")
    kv.check_integrity()
    kv.clock.t = 1.5
    assert kv.tier.evict_beyond(5.0) == 3 and kv.num_offloaded_blocks("last") == 3
    assert kv.tier.evict_beyond(5.0) == 0 and kv.is_resident("soon")
    kv.check_integrity()


def test_next_use_follows_hint_changes():
    kv = make_tiered("next_use")
    idle(kv, "a", 4, next_use=10.0)
    idle(kv, "b", 4, next_use=20.0)
    kv.set_next_use("a", 30.0)  # a is now needed last
    assert kv.tier.evict(1) and kv.num_blocks_held("a") == 1
    kv.set_next_use("a", 1.0)  # and now first: b goes next
    assert kv.tier.evict(1) and kv.num_blocks_held("b") == 1
    kv.check_integrity()


def test_lru_follows_use():
    clock = FakeClock()
    kv = make_tiered("lru", clock=clock)
    idle(kv, "a", 4)
    clock.t = 1.0
    idle(kv, "b", 4)
    clock.t = 2.0
    kv.set_evictable("a", True)  # a is touched again: b is now the least recently used
    assert kv.tier.evict(1) and kv.num_blocks_held("b") == 1
    kv.check_integrity()


@pytest.mark.parametrize("policy", POLICIES)
def test_blocks_in_flight_are_pinned_until_the_copy_is_done(policy):
    kv = make_tiered(policy, num_blocks=6, host_blocks=8, mode="thread")
    gate = GatedCopier(kv.tier.worker)
    idle_threaded(kv, "a", 6)
    assert kv.tier.evict(3)  # a is fully offloaded; 6 free
    assert kv.load("a")  # 3 device blocks allocated, the copy starts
    assert gate.started.wait(5.0)  # the worker is inside the first chunk's copy
    assert kv.num_free_blocks == 3 and not kv.is_resident("a") and kv.tier.has_transfers_in_flight
    assert kv.tier.num_evictable_blocks() == 0  # a load in flight pins its sequence
    kv.check_integrity()
    kv.free("a")  # the sequence goes, but a copy is writing into its new blocks
    assert kv.num_free_blocks == 3 and kv.tier.stats["host_blocks_used"] == 3
    kv.check_integrity()
    gate.release.set()  # the chunk ends; the worker sees the cancel and stops
    assert kv.tier.wait_for_transfer(5.0)
    done = kv.tier.poll()
    assert [(d.kind, d.cancelled, d.num_blocks) for d in done] == [("load", True, 2)]
    assert kv.num_free_blocks == 6 and kv.tier.stats["host_blocks_used"] == 0 and not kv.tier.has_transfers_in_flight
    kv.check_integrity()
    kv.tier.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_a_transfer_stopped_between_chunks_releases_its_blocks_at_once(policy):
    kv = make_tiered(policy, num_blocks=6, host_blocks=8)
    idle(kv, "a", 6)
    assert kv.tier.evict(3) and kv.load("a")
    kv.tier.worker.run_chunk()  # 2 of 3 blocks copied; no copy runs now
    kv.free("a")
    assert kv.num_free_blocks == 6 and kv.tier.stats["host_blocks_used"] == 0
    kv.check_integrity()
    assert [(d.kind, d.cancelled, d.num_blocks) for d in settle(kv)] == [("load", True, 2)]


@pytest.mark.parametrize("policy", POLICIES)
def test_truncated_blocks_under_a_store_are_released_after_it(policy):
    kv = make_tiered(policy)
    grow(kv, "a", 6)
    kv.store("a")  # 3 blocks being copied out
    kv.truncate("a", 1)  # keep one block: the other two are no longer a's, but the copy reads them
    assert kv.num_blocks_held("a") == 1 and kv.num_free_blocks == 5
    kv.check_integrity()
    settle(kv)  # only the kept block's copy becomes valid
    assert kv.num_free_blocks == 7 and kv.tier.stats["host_blocks_used"] == 1
    kv.set_evictable("a", True)
    assert kv.tier.num_evictable_blocks() == 1
    kv.check_integrity()


@pytest.mark.parametrize("policy", POLICIES)
def test_foreground_load_evicts_by_policy_or_changes_nothing(policy):
    clock = FakeClock()
    kv = make_tiered(policy, num_blocks=6, clock=clock)
    idle(kv, "a", 4, next_use=1.0)  # 2 blocks, needed soon, used at t=0
    assert kv.tier.evict(2)
    clock.t = 1.0
    idle(kv, "b", 4, next_use=50.0)  # 2 blocks, needed late, used at t=1
    grow(kv, "c", 8)  # 4 blocks in use: device full (2 + 4)
    assert kv.num_free_blocks == 0
    before = snapshot(kv, ["a", "b", "c"])
    kv.set_evictable("b", False)  # b in use too: nothing may be evicted
    assert not kv.load("a")
    assert snapshot(kv, ["a", "b", "c"]) == before and kv.is_resident("b")
    kv.check_integrity()
    kv.set_evictable("b", True)
    assert kv.load("a")  # b makes room
    assert kv.num_blocks_held("b") == 0 and kv.num_offloaded_blocks("b") == 2
    settle(kv)
    assert kv.is_resident("a") and read(kv, "a") == expected(kv, "a")


def test_background_load_displaces_only_sequences_needed_later_under_next_use():
    kv = make_tiered("next_use", num_blocks=4)
    idle(kv, "a", 4, next_use=20.0)
    assert kv.tier.evict(2)  # a offloaded
    idle(kv, "soon", 4, next_use=10.0)
    idle(kv, "late", 4, next_use=30.0)  # device full
    assert kv.load("a", background=True)  # "late" is needed after a: it goes
    assert kv.num_blocks_held("late") == 0 and kv.num_blocks_held("soon") == 2
    settle(kv)
    kv.set_next_use("a", 20.0)
    assert kv.tier.evict(2) and kv.num_blocks_held("a") == 0  # a is now the farthest
    grow(kv, "busy", 4)  # in use: the device is full with "soon" (next use 10) and "busy"
    kv.set_next_use("a", 40.0)
    before = snapshot(kv, ["a", "soon", "busy"])
    assert not kv.load("a", background=True)  # "soon" is needed before a: it stays
    assert snapshot(kv, ["a", "soon", "busy"]) == before
    kv.check_integrity()
    kv.set_next_use("soon", 60.0)  # now it is needed after a
    assert kv.load("a", background=True) and kv.num_blocks_held("soon") == 0
    kv.check_integrity()


def test_background_load_under_lru_uses_free_blocks_only():
    kv = make_tiered("lru", num_blocks=4)
    idle(kv, "a", 4)
    assert kv.tier.evict(2)
    idle(kv, "b", 4)
    idle(kv, "c", 4)  # device full of idle, backed KV
    assert not kv.load("a", background=True)  # lru never evicts for a background load
    assert kv.num_blocks_held("b") == kv.num_blocks_held("c") == 2
    assert kv.load("a")  # a foreground load does
    settle(kv)
    assert kv.is_resident("a")


def test_eviction_policy_names_and_validation():
    assert EVICTION_POLICIES.names() == ("none", "lru", "next_use")
    config = KVPoolConfig(num_blocks=4, num_layers=1, num_kv_heads=1, head_dim=2, block_size=BLOCK)
    with pytest.raises(ValueError, match=r"unknown eviction policy 'fifo'; choose from \['none', 'lru', 'next_use'\]"):
        KVCacheManager(config, HostTierConfig(4), "fifo")
    with pytest.raises(ValueError, match="'lru' needs a host tier"):
        KVCacheManager(config, None, "lru")
    with pytest.raises(ValueError, match="'none' takes no host tier"):
        KVCacheManager(config, HostTierConfig(4), "none")
    with pytest.raises(ValueError, match="transfer_mode must be one of"):
        KVCacheManager(config, HostTierConfig(4), "lru", transfer_mode="eager")


def test_without_a_host_tier_nothing_moves():
    kv = KVCacheManager(KVPoolConfig(num_blocks=4, num_layers=1, num_kv_heads=1, head_dim=2, block_size=BLOCK))
    kv.reserve("a", 4)
    kv.set_evictable("a", True)
    kv.set_next_use("a", 9.0)
    kv.protect("a", 9.0)
    kv.store("a")
    assert kv.tier.evict(0) and not kv.tier.evict(1) and kv.tier.num_evictable_blocks() == 0
    assert not kv.tier.lift_protections()
    assert kv.load("a") and kv.preload("a", 1.0) == "resident" and not kv.cancel_load("a")
    assert kv.tier.poll() == [] and not kv.tier.wait_for_transfer(0.0) and not kv.tier.has_transfers_in_flight
    assert kv.tier.link_gbps is None and kv.tier.worker is None and set(kv.tier.stats.values()) == {0}
    assert kv.is_resident("a") and kv.num_offloaded_blocks("a") == 0
    kv.tier.close()
    kv.check_integrity()


@pytest.mark.parametrize("field, value, message", [
    ("num_blocks", 0, "num_blocks must be a positive integer"),
    ("chunk_blocks", 1.5, "chunk_blocks must be a positive integer"),
    ("emulated_link_gbps", 0.0, "emulated_link_gbps must be None or a finite number > 0"),
    ("emulated_link_gbps", float("inf"), "emulated_link_gbps must be None or a finite number > 0"),
    ("warm_protect_s", -1.0, "warm_protect_s must be a finite number >= 0"),
])
def test_host_tier_config_rejects_bad_values_by_name(field, value, message):
    kwargs = {"num_blocks": 4, field: value}
    with pytest.raises(ValueError, match=message):
        HostTierConfig(**kwargs)
