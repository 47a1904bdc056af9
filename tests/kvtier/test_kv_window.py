"""Blocks freed in place between a sequence's sinks and its window (KVCacheManager.drop)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier import HostTierConfig, KVCacheManager, KVPoolConfig, blocks_for


def make_manager(num_blocks: int = 12, block_size: int = 4) -> KVCacheManager:
    return KVCacheManager(KVPoolConfig(num_blocks=num_blocks, num_layers=1, num_kv_heads=1, head_dim=2,
                                       block_size=block_size))


def test_drop_frees_the_blocks_between_the_sinks_and_the_window_start():
    kv = make_manager()
    kv.reserve("a", 22)  # logical blocks 0-5: positions 0-3, 4-7, ..., 20-21
    ids = list(kv.table("a").block_ids)
    # Sinks are positions 0-4 (blocks 0 and 1 stay); the window starts at 13, in block 3 (stays):
    # block 2 (positions 8-11) holds nothing below 5 and nothing from 13 on, so it goes.
    assert kv.drop("a", num_sink_tokens=5, keep_from=13) == 1
    assert kv.table("a").block_ids == ids[:2] + ids[3:]
    assert kv.dropped("a") == range(8, 12)
    assert (kv.num_blocks_held("a"), kv.num_free_blocks, kv.num_resident_tokens("a")) == (5, 7, 18)
    kv.check_integrity()
    assert kv.drop("a", 5, 13) == 0  # nothing more to free
    assert kv.drop("a", 5, 21) == 2  # window now starts in block 5: blocks 3 and 4 go
    assert kv.table("a").block_ids == ids[:2] + ids[5:] and kv.dropped("a") == range(8, 20)
    kv.check_integrity()


def test_positions_keep_counting_after_a_drop():
    kv = make_manager(num_blocks=6)
    kv.reserve("a", 16)
    kv.drop("a", 0, 12)  # plain sliding window: blocks 0-2 go, block 3 stays
    assert (kv.num_blocks_held("a"), kv.num_free_blocks) == (1, 5)
    # Reserving counts logical blocks: 4 dropped-or-held, position 16 needs a fifth.
    assert kv.num_new_blocks("a", 17) == 1 and kv.can_reserve("a", 17 + 4 * 4)
    assert not kv.can_reserve("a", 17 + 5 * 4)
    kv.reserve("a", 24)
    live = kv.table("a").block_ids
    assert kv.slot_ids("a", 12, 24) == [live[(p // 4) - 3] * 4 + p % 4 for p in range(12, 24)]
    assert kv.live_blocks("a", 24) == (live, [3, 4, 5]) and kv.live_blocks("a", 17) == (live[:2], [3, 4])
    with pytest.raises(ValueError, match="dropped"):
        kv.slot_ids("a", 11, 13)
    kv.check_integrity()


def test_drop_never_touches_positions_still_to_be_reserved():
    kv = make_manager()
    kv.reserve("a", 10)
    assert kv.drop("a", 0, 100) == 2  # keep_from beyond the reserved positions: the block holding 10 is kept
    assert kv.dropped("a") == range(0, 8) and kv.num_blocks_held("a") == 1
    kv.check_integrity()


def test_drop_rejects_a_sink_count_other_than_the_first():
    kv = make_manager()
    kv.reserve("a", 24)
    kv.drop("a", 4, 16)
    with pytest.raises(ValueError, match="1 sink blocks, not 2"):
        kv.drop("a", 5, 20)
    assert kv.drop("a", 3, 20) == 1  # 3 sink tokens are still one sink block
    kv.check_integrity()


def test_truncate_into_dropped_positions_raises_and_changes_nothing():
    kv = make_manager()
    kv.reserve("a", 30)
    kv.drop("a", 4, 16)  # positions 4-15 dropped
    before = (list(kv.table("a").block_ids), kv.table("a").num_tokens, kv.num_free_blocks)
    with pytest.raises(ValueError, match="positions 4-15 were dropped"):
        kv.truncate("a", 9)
    assert (list(kv.table("a").block_ids), kv.table("a").num_tokens, kv.num_free_blocks) == before
    kv.truncate("a", 17)  # past the dropped positions: keeps blocks 0 and 4
    assert kv.table("a").block_ids == before[0][:2] and kv.dropped("a") == range(4, 16)
    kv.check_integrity()
    kv.truncate("a", 16)  # exactly the dropped end: only the sink block is live
    assert kv.table("a").block_ids == before[0][:1] and kv.num_resident_tokens("a") == 4
    kv.check_integrity()
    kv.truncate("a", 3)  # inside the sinks: the drop is forgotten
    assert kv.dropped("a") == range(0) and kv.table("a").num_tokens == 3
    kv.reserve("a", 9)  # grows plainly again
    assert kv.num_blocks_held("a") == 3
    kv.check_integrity()


@pytest.mark.parametrize("sinks", [0, 8])
def test_skip_resumes_past_positions_never_reserved_holding_only_the_blocks_before_them(sinks):
    kv = make_manager()
    if sinks:  # a recomputation's sink blocks (none: the sequence does not exist yet)
        kv.reserve("a", sinks)
    assert kv.num_new_blocks("a", 42, start=32) == 3  # blocks 8-10: the skipped ones take none
    kv.skip("a", 32)
    assert kv.dropped("a") == range(sinks, 32) and kv.table("a").num_tokens == 32
    kv.reserve("a", 42)
    assert kv.num_blocks_held("a") == sinks // 4 + 3 and kv.num_resident_tokens("a") == sinks + 10
    assert kv.live_blocks("a", 42)[1] == [*range(sinks // 4), 8, 9, 10]
    kv.skip("a", 40)  # not past the end: nothing
    kv.drop("a", sinks, 40)  # the window moves on as usual
    assert kv.dropped("a") == range(sinks, 40) and kv.num_blocks_held("a") == sinks // 4 + 1
    kv.check_integrity()


@pytest.mark.parametrize("end, start", [(6, 12), (8, 13)])
def test_skip_within_a_block_is_refused_and_changes_nothing(end, start):
    kv = make_manager()
    kv.reserve("a", end)
    with pytest.raises(ValueError, match="cannot skip"):
        kv.skip("a", start)
    assert kv.table("a").num_tokens == end and kv.dropped("a") == range(0)
    kv.check_integrity()


def make_tiered() -> KVCacheManager:
    return KVCacheManager(KVPoolConfig(num_blocks=8, num_layers=1, num_kv_heads=1, head_dim=2, block_size=4),
                          HostTierConfig(num_blocks=8), eviction="lru", transfer_mode="inline")


def settle(kv: KVCacheManager) -> None:
    kv.tier.worker.run_all()
    kv.tier.poll()


def written(kv: KVCacheManager, seq: str, positions: range) -> list[float]:
    slots = torch.tensor(kv.slot_ids(seq, positions.start, positions.stop))
    return kv.cache.keys[0].view(-1, 1, 2)[slots][:, 0, 0].tolist()


def test_a_windowed_sequence_goes_to_the_host_tier_and_comes_back_with_its_live_blocks():
    kv = make_tiered()
    kv.reserve("a", 20)
    kv.cache.keys[0].view(-1, 1, 2)[torch.tensor(kv.slot_ids("a", 0, 20))] = torch.arange(20.0).view(-1, 1, 1)
    kv.set_evictable("a", True)
    kv.store("a")
    settle(kv)  # host copies of blocks 0-4
    assert kv.drop("a", 4, 12) == 2  # blocks 1 and 2 go, on both tiers: 3 host copies stay, shifted with theirs
    assert kv.tier.stats["host_blocks_used"] == 3
    assert kv.tier.evict(3) and kv.num_blocks_held("a") == 0 and kv.num_offloaded_blocks("a") == 3
    assert kv.drop("a", 4, 20) == 0  # not resident: nothing moves
    kv.check_integrity()
    assert kv.load("a")
    settle(kv)
    assert kv.is_resident("a") and kv.dropped("a") == range(4, 12)
    assert written(kv, "a", range(0, 4)) + written(kv, "a", range(12, 20)) == [*range(4), *range(12, 20)]
    kv.check_integrity()


def test_a_store_in_flight_keeps_only_what_lies_before_a_drop():
    kv = make_tiered()
    kv.reserve("a", 20)
    kv.store("a")  # 5 blocks on their way
    kv.drop("a", 4, 16)  # blocks 1-3 go while the copy is in flight
    settle(kv)
    assert kv.tier.stats["host_blocks_used"] == 1  # the sink block's copy; the rest are written back anew
    kv.store("a")
    settle(kv)
    assert kv.tier.stats["host_blocks_used"] == 2
    kv.check_integrity()


def test_state_blocks_come_first_hold_no_positions_and_go_with_the_sequence():
    kv = make_manager()
    kv.reserve_state("a", 2)
    state = kv.state_blocks("a")
    assert len(state) == 2 and kv.num_blocks_held("a") == 2 and kv.table("a").num_tokens == 0
    assert kv.num_new_blocks("a", 8) == 2 and kv.num_resident_tokens("a") == 0
    kv.reserve("a", 20)
    table = kv.table("a")
    assert table.block_ids[:2] == state and kv.num_blocks_held("a") == 7
    assert kv.slot_ids("a", 4, 6) == [table.block_ids[3] * 4, table.block_ids[3] * 4 + 1]
    assert kv.live_blocks("a", 20) == (table.block_ids[2:], [0, 1, 2, 3, 4])
    assert kv.drop("a", 4, 16) == 3 and kv.state_blocks("a") == state
    assert kv.live_blocks("a", 20)[1] == [0, 4] and kv.num_resident_tokens("a") == 8
    kv.truncate("a", 16)
    assert kv.num_blocks_held("a") == 3 and kv.state_blocks("a") == state
    kv.check_integrity()
    with pytest.raises(ValueError, match="already has blocks"):
        kv.reserve_state("a", 1)
    kv.reserve("b", 0)  # known, holding nothing: it may still start with its state
    kv.reserve_state("b", 1)
    assert kv.num_blocks_held("b") == 1 and kv.table("b").num_state == 1
    kv.free("b")
    kv.free("a")
    assert kv.num_free_blocks == kv.pool.num_blocks
    kv.check_integrity()


def test_resident_tokens_count_device_positions():
    kv = make_manager()
    assert kv.num_resident_tokens("unknown") == 0
    kv.reserve("a", 14)
    assert kv.num_resident_tokens("a") == 14
    kv.drop("a", 2, 13)  # blocks 1 and 2 go: positions 0-3 and 12-13 stay
    assert kv.num_resident_tokens("a") == 6


def test_windowed_sequence_plateaus_far_past_the_pool():
    """A sequence sliding a window of 10 tokens after 3 sinks, 5 tokens at a time, through 100 pools' worth."""
    kv, size, sinks, window, chunk = make_manager(num_blocks=8), 4, 3, 10, 5
    bound = blocks_for(sinks, size) + blocks_for(window + chunk, size) + 1
    for start in range(0, 100 * 8 * size, chunk):
        kv.drop("a", sinks, start - window)  # before the chunk at `start`
        assert kv.can_reserve("a", start + chunk)
        kv.reserve("a", start + chunk)
        assert kv.num_blocks_held("a") <= bound <= kv.pool.num_blocks
        kv.check_integrity()
    assert kv.table("a").num_tokens == 100 * 8 * size and kv.peak_used_blocks <= bound


operation = st.one_of(
    st.tuples(st.just("reserve"), st.sampled_from("ab"), st.integers(0, 60)),
    st.tuples(st.just("drop"), st.sampled_from("ab"), st.integers(-5, 60)),
    st.tuples(st.just("truncate"), st.sampled_from("ab"), st.integers(0, 60)),
    st.tuples(st.just("free"), st.sampled_from("ab"), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(operation, max_size=40), block_size=st.sampled_from([1, 3, 4]), sinks=st.integers(0, 6))
def test_random_reserve_drop_truncate_free_keeps_integrity(ops, block_size, sinks):
    kv = make_manager(num_blocks=10, block_size=block_size)
    for op, seq, n in ops:
        if op == "reserve" and kv.can_reserve(seq, n):
            kv.reserve(seq, n)
        elif op == "drop":
            kv.drop(seq, sinks, n)
        elif op == "truncate":
            dropped = kv.dropped(seq)
            if dropped.start < n < dropped.stop:
                with pytest.raises(ValueError):
                    kv.truncate(seq, n)
            else:
                kv.truncate(seq, n)
        elif op == "free":
            kv.free(seq)
        kv.check_integrity()
        assert kv.num_free_blocks + sum(kv.num_blocks_held(s) for s in "ab") == kv.pool.num_blocks
        slots = []  # live positions have distinct slots; dropped ones have none
        for s in "ab":
            live = [p for p in range(kv.table(s).num_tokens) if p not in kv.dropped(s)]
            slots += [kv.slot_ids(s, p, p + 1)[0] for p in live]
            assert len(live) == kv.num_resident_tokens(s)
        assert len(slots) == len(set(slots))
