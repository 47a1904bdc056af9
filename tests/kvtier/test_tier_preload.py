"""Speech-triggered preload: outcomes, warm protection, hits, cancel and fallback, promotion."""

import pytest

from tests.kvtier.tier_harness import (
    BYTES_PER_BLOCK,
    POLICIES,
    FakeClock,
    expected,
    grow,
    idle,
    make_tiered,
    read,
    settle,
)

GBPS = 0.0001  # 100 kbit/s: one 64-byte block takes 5.1 ms


def offloaded(policy="next_use", clock=None, **kwargs):
    """A manager with "a" (3 blocks, next use at t=10) fully offloaded."""
    kv = make_tiered(policy, clock=clock or FakeClock(), **kwargs)
    idle(kv, "a", 6, next_use=10.0)
    assert kv.tier.evict(3)
    return kv


@pytest.mark.parametrize("policy", POLICIES)
def test_preload_outcomes(policy):
    kv = offloaded(policy, gbps=GBPS)
    assert kv.preload("unknown", 1.0) == "resident"
    grow(kv, "b", 2)
    assert kv.preload("b", 1.0) == "resident"
    three_blocks_s = 3 * BYTES_PER_BLOCK * 8 / (kv.tier.link_gbps * 1e9)
    assert kv.preload("a", three_blocks_s * 0.5) == "too_late"  # the copy would end after the user does
    grow(kv, "busy", 12)  # 6 blocks in use, 1 free: no room, and nothing may be evicted
    assert kv.preload("a", 1.0) == "no_room" and kv.num_offloaded_blocks("a") == 3
    kv.free("busy")
    assert kv.preload("a", 1.0) == "admitted" and kv.tier.has_transfers_in_flight
    assert kv.preload("a", 1.0) == "admitted"  # already on its way: not counted again
    kv.check_integrity()
    settle(kv)
    stats = kv.tier.stats
    outcomes = ("admitted", "resident", "too_late", "no_room", "completed")
    assert [stats[f"preloads_{outcome}"] for outcome in outcomes] == [1, 2, 1, 1, 1]
    assert stats["loads_background_bytes"] == 3 * BYTES_PER_BLOCK


@pytest.mark.parametrize("policy", POLICIES)
def test_a_completed_preload_is_protected_until_its_use_and_counts_a_hit(policy):
    clock = FakeClock()
    kv = offloaded(policy, clock=clock, warm_protect_s=5.0)
    assert kv.preload("a", 2.0) == "admitted"  # the user speaks; the turn starts in about 2 s
    clock.t = 0.5
    settle(kv)  # done at t=0.5: protected until t=2.0 (1.5 s of lead left, under 5 s)
    assert kv.is_resident("a") and read(kv, "a") == expected(kv, "a")
    assert kv.tier.num_evictable_blocks() == 0
    clock.t = 2.0
    assert kv.tier.num_evictable_blocks() == 3  # the protection ran out
    kv.set_evictable("a", False)  # the turn uses it: a hit
    assert kv.tier.stats["preloads_hit"] == 1
    kv.check_integrity()


def test_warm_protection_is_capped_by_warm_protect_s():
    clock = FakeClock()
    kv = offloaded(clock=clock, warm_protect_s=1.0)
    kv.preload("a", 30.0)
    settle(kv)
    clock.t = 0.999
    assert kv.tier.num_evictable_blocks() == 0
    clock.t = 1.0
    assert kv.tier.num_evictable_blocks() == 3


def test_a_preload_evicted_before_use_is_no_hit():
    clock = FakeClock()
    kv = offloaded(clock=clock, warm_protect_s=0.0)
    kv.preload("a", 1.0)
    settle(kv)
    clock.t = 1.0
    assert kv.tier.evict(1)
    assert kv.load("a")
    settle(kv)
    kv.set_evictable("a", False)
    assert kv.tier.stats["preloads_hit"] == 0 and kv.tier.stats["preloads_completed"] == 1


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cancelled_preload_releases_its_blocks_and_a_foreground_load_restores_the_same_kv(policy):
    kv = offloaded(policy, chunk_blocks=1)
    free = kv.num_free_blocks
    assert kv.preload("a", 1.0) == "admitted" and kv.num_free_blocks == free - 3
    kv.tier.worker.run_chunk()  # one block of three copied
    assert kv.cancel_load("a")  # the user stopped talking to this session
    assert kv.num_free_blocks == free and kv.num_offloaded_blocks("a") == 3 and not kv.tier.has_transfers_in_flight
    assert not kv.cancel_load("a")  # nothing left to cancel
    kv.check_integrity()
    [done] = settle(kv)
    assert (done.kind, done.background, done.cancelled, done.num_blocks) == ("load", True, True, 1)
    assert kv.load("a")  # the turn comes anyway: the fallback is a foreground load
    settle(kv)
    assert kv.is_resident("a") and read(kv, "a") == expected(kv, "a")
    stats = kv.tier.stats
    assert (stats["preloads_cancelled"], stats["loads_cancelled"], stats["preloads_completed"]) == (1, 1, 0)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_foreground_load_promotes_a_preload_in_flight(policy):
    kv = offloaded(policy, chunk_blocks=1)
    grow(kv, "b", 4)
    kv.store("b")  # a store queued before the preload
    assert kv.preload("a", 1.0) == "admitted"
    kv.tier.worker.run_chunk()  # the preload (background load) goes before the store
    assert kv.load("a")  # the turn starts before the preload is done: foreground now
    assert not kv.cancel_load("a")  # a foreground load is not cancelled
    done = settle(kv)
    assert [(d.seq, d.kind, d.background) for d in done] == [("a", "load", False), ("b", "store", True)]
    assert kv.tier.stats["preloads_promoted"] == 1 and kv.tier.stats["preloads_completed"] == 0
    assert kv.tier.stats["loads_foreground_bytes"] == 3 * BYTES_PER_BLOCK
    assert read(kv, "a") == expected(kv, "a")
