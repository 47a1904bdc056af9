"""Stores and loads between the tiers: KV bytes, write invalidation, host room, pacing, the link rate, threads."""

import time

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


@pytest.mark.parametrize("policy", POLICIES)
def test_store_evict_load_restores_the_same_kv_bytes(policy):
    kv = make_tiered(policy, num_blocks=4, host_blocks=8)
    idle(kv, "a", 7)  # 4 blocks, the last one partly written
    assert read(kv, "a") == expected(kv, "a")
    assert kv.tier.evict(4)  # all on the host now
    grow(kv, "b", 8)  # b takes a's old device blocks and overwrites them
    kv.set_evictable("b", True)
    kv.store("b")
    settle(kv)
    assert kv.load("a")  # evicts b to make room, copies a back
    settle(kv)
    assert kv.is_resident("a") and read(kv, "a") == expected(kv, "a")
    assert kv.load("b")  # nothing free, a is in use (not evictable): no room
    kv.set_evictable("a", True)
    assert kv.load("b")
    settle(kv)
    assert read(kv, "b") == expected(kv, "b")


@pytest.mark.parametrize("policy", POLICIES)
def test_writes_invalidate_host_copies_from_the_written_block_on(policy):
    kv = make_tiered(policy)
    idle(kv, "a", 3)  # blocks 0 (full) and 1 (half) backed
    assert kv.tier.stats["host_blocks_used"] == 2
    kv.set_evictable("a", False)
    grow(kv, "a", 4)  # writes position 3, in block 1: its host copy is stale
    assert kv.tier.stats["host_blocks_used"] == 1
    kv.set_evictable("a", True)
    assert kv.tier.num_evictable_blocks() == 0  # the suffix block is not backed any more
    kv.store("a")  # only block 1 is copied again
    assert [(d.kind, d.num_blocks, d.num_bytes) for d in settle(kv)] == [("store", 1, BYTES_PER_BLOCK)]
    assert kv.tier.num_evictable_blocks() == 2
    kv.check_integrity()
    grow(kv, "a", 4)  # no new position: nothing is invalidated
    assert kv.tier.num_evictable_blocks() == 2
    grow(kv, "a", 5)  # position 4 starts block 2: blocks 0-1 stay valid
    assert kv.tier.stats["host_blocks_used"] == 2
    kv.check_integrity()


@pytest.mark.parametrize("policy", POLICIES)
def test_a_write_during_a_store_keeps_only_the_blocks_before_it(policy):
    kv = make_tiered(policy)
    grow(kv, "a", 5)  # 3 blocks
    kv.store("a")
    grow(kv, "a", 6)  # the store may copy block 2 half-written: its copy is not kept
    settle(kv)
    assert kv.tier.stats["host_blocks_used"] == 2
    kv.set_evictable("a", True)
    assert kv.tier.num_evictable_blocks() == 0
    kv.store("a")
    settle(kv)
    assert kv.tier.evict(3) and kv.load("a")
    settle(kv)
    assert read(kv, "a") == expected(kv, "a")


@pytest.mark.parametrize("policy", POLICIES)
def test_truncate_drops_host_copies_past_the_cut_and_keeps_an_only_copy(policy):
    kv = make_tiered(policy)
    idle(kv, "a", 6)  # 3 blocks on both tiers
    assert kv.tier.evict(2)  # blocks 1 and 2 only on the host
    kv.truncate("a", 3)  # keep 3 tokens: block 2 goes from the host; block 1 (cut) is the only copy of position 2
    assert kv.num_offloaded_blocks("a") == 1 and kv.tier.stats["host_blocks_used"] == 2
    kv.check_integrity()
    assert kv.load("a")
    settle(kv)
    assert read(kv, "a") == expected(kv, "a")
    kv.truncate("a", 0)
    assert kv.tier.stats["host_blocks_used"] == 0 and kv.num_blocks_held("a") == 0
    kv.check_integrity()


@pytest.mark.parametrize("policy", POLICIES)
def test_reserving_a_sequence_that_is_not_resident_raises(policy):
    kv = make_tiered(policy)
    idle(kv, "a", 4)
    assert kv.tier.evict(1)
    assert not kv.can_reserve("a", 4) and kv.num_new_blocks("a", 6) == 1
    with pytest.raises(ValueError, match="'a' is not resident: load it before reserving"):
        kv.reserve("a", 6)
    assert kv.table("a").num_tokens == 4
    kv.check_integrity()


def test_a_store_that_does_not_fit_is_skipped():
    kv = make_tiered("next_use", num_blocks=8, host_blocks=3)
    idle(kv, "a", 6)  # 3 host blocks: the host is full
    assert kv.tier.evict(3)  # they are the only copies now
    grow(kv, "b", 2)
    kv.store("b")
    assert kv.tier.stats["stores_skipped"] == 1 and not kv.tier.has_transfers_in_flight
    assert kv.tier.stats["host_blocks_used"] == 3 and kv.num_offloaded_blocks("a") == 3
    kv.check_integrity()


def test_a_full_host_drops_duplicates_least_recently_used_first_never_an_only_copy():
    clock = FakeClock()
    kv = make_tiered("lru", num_blocks=16, host_blocks=6, clock=clock)
    idle(kv, "only", 4)
    assert kv.tier.evict(2)  # "only" has its 2 blocks on the host only
    clock.t = 1.0
    idle(kv, "older", 4)  # 2 host blocks duplicating resident ones
    clock.t = 2.0
    idle(kv, "newer", 4)  # the host is full
    clock.t = 3.0
    grow(kv, "c", 2)  # in use from t=3
    kv.store("c")  # needs 1 block: the last copy of "older" goes
    settle(kv)
    assert kv.tier.stats["host_copies_dropped"] == 1 and kv.tier.stats["host_blocks_used"] == 6
    assert kv.tier.num_evictable_blocks() == 2  # "newer"; "older" lost its suffix copy, "c" is in use
    grow(kv, "d", 6)
    kv.store("d")  # needs 3: the rest of "older", then both of "newer"
    settle(kv)
    assert kv.tier.stats["host_copies_dropped"] == 4 and kv.tier.num_evictable_blocks() == 0
    grow(kv, "e", 2)
    kv.store("e")  # "c" and "d" (both t=3, c first) duplicate resident blocks; "only" is never touched
    settle(kv)
    grow(kv, "f", 10)
    kv.store("f")  # needs 5; only 4 copies (d's 3, e's 1) duplicate resident blocks: skipped
    assert kv.tier.stats["stores_skipped"] == 1 and kv.tier.stats["host_copies_dropped"] == 5
    assert kv.num_offloaded_blocks("only") == 2
    assert kv.load("only")
    settle(kv)
    assert read(kv, "only") == expected(kv, "only")


def test_a_paced_transfer_takes_at_least_bytes_over_the_rate():
    gbps = 0.0001  # 100 kbit/s: 4 blocks of 64 bytes take 20.5 ms
    kv = make_tiered("lru", gbps=gbps, chunk_blocks=2)
    grow(kv, "a", 8)
    started = time.perf_counter()
    kv.store("a")
    [done] = settle(kv)
    elapsed = time.perf_counter() - started
    floor = 4 * BYTES_PER_BLOCK * 8 / (gbps * 1e9)
    assert done.num_bytes == 4 * BYTES_PER_BLOCK
    assert done.seconds >= floor and elapsed >= floor
    assert kv.tier.stats["stores_seconds"] == pytest.approx(done.seconds)
    assert kv.tier.link_gbps <= gbps and kv.tier.link_gbps > gbps / 3


def test_link_rate_is_measured_at_memory_speed_without_pacing():
    kv = make_tiered("lru")
    assert 0 < kv.tier.link_gbps < float("inf")


def test_stats_count_transfers_evictions_and_host_use():
    kv = make_tiered("next_use", num_blocks=4, host_blocks=8)
    idle(kv, "a", 4)  # 2 blocks stored
    assert kv.tier.evict(2)
    assert kv.load("a", background=True)
    settle(kv)
    kv.set_evictable("a", True)
    assert kv.tier.evict(1)
    assert kv.load("a")
    settle(kv)
    stats = kv.tier.stats
    assert stats["stores_bytes"] == 2 * BYTES_PER_BLOCK and stats["stores_seconds"] > 0
    assert stats["loads_background_bytes"] == 2 * BYTES_PER_BLOCK
    assert stats["loads_foreground_bytes"] == BYTES_PER_BLOCK
    assert (stats["evictions"], stats["evictions_next_use"], stats["evictions_lru"]) == (3, 3, 0)
    assert (stats["host_blocks_used"], stats["host_blocks_peak"]) == (2, 2)
    assert all(isinstance(v, (int, float)) for v in stats.values())


def test_a_threaded_manager_completes_transfers_and_wakes_its_engine():
    woken = []
    kv = make_tiered("next_use", mode="thread", on_transfer_done=lambda: woken.append(1))
    grow(kv, "a", 6)
    kv.store("a")
    assert kv.tier.has_transfers_in_flight
    assert kv.tier.wait_for_transfer(5.0)
    [done] = kv.tier.poll()
    assert done.kind == "store" and woken and not kv.tier.has_transfers_in_flight
    kv.set_evictable("a", True)
    assert kv.tier.evict(3) and kv.load("a")
    while not kv.is_resident("a"):
        kv.tier.wait_for_transfer(5.0)
        kv.tier.poll()
    assert read(kv, "a") == expected(kv, "a")
    kv.check_integrity()
    kv.tier.close()
    kv.tier.close()  # idempotent
    assert not kv.tier.worker._thread.is_alive()
    assert not kv.tier.wait_for_transfer(0.01)
