import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier import KVCacheManager, KVPoolConfig, OutOfBlocks, blocks_for


def make_manager(num_blocks: int = 6, block_size: int = 4) -> KVCacheManager:
    return KVCacheManager(KVPoolConfig(num_blocks=num_blocks, num_layers=1, num_kv_heads=1, head_dim=2,
                                       block_size=block_size))


def assert_conserved(kv: KVCacheManager, seqs) -> None:
    """Every block is either free or held by exactly one table (no sharing here)."""
    kv.check_integrity()
    held = [b for s in seqs for b in kv.table(s).block_ids]
    assert len(held) == len(set(held))
    assert kv.num_free_blocks + len(held) == kv.pool.num_blocks


def test_blocks_for_rounds_up():
    assert [blocks_for(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_reserve_grows_only_by_the_blocks_needed():
    kv = make_manager()
    assert kv.num_new_blocks("a", 5) == 2 and kv.can_reserve("a", 5)
    kv.reserve("a", 5)  # 5 tokens -> 2 blocks
    assert (kv.num_blocks_held("a"), kv.table("a").num_tokens, kv.num_free_blocks) == (2, 5, 4)
    kv.check_integrity()
    kv.reserve("a", 8)  # still 2 blocks
    assert (kv.num_blocks_held("a"), kv.table("a").num_tokens, kv.num_free_blocks) == (2, 8, 4)
    kv.check_integrity()
    kv.reserve("a", 3)  # asking for less never shrinks
    assert (kv.num_blocks_held("a"), kv.table("a").num_tokens) == (2, 8)
    kv.check_integrity()
    kv.reserve("a", 9)  # a third block
    assert (kv.num_blocks_held("a"), kv.num_free_blocks) == (3, 3)
    assert kv.occupancy == pytest.approx(0.5)
    kv.check_integrity()


def test_reserve_beyond_free_raises_and_changes_nothing():
    kv = make_manager(num_blocks=3)
    kv.reserve("a", 8)  # 2 of 3 blocks
    before = list(kv.table("a").block_ids)
    assert not kv.can_reserve("a", 13)  # would need 2 more
    with pytest.raises(OutOfBlocks):
        kv.reserve("a", 13)
    assert kv.table("a").block_ids == before and kv.table("a").num_tokens == 8 and kv.num_free_blocks == 1
    kv.check_integrity()
    with pytest.raises(OutOfBlocks):
        kv.reserve("b", 5)  # a new sequence that does not fit
    assert kv.num_blocks_held("b") == 0 and kv.num_free_blocks == 1
    kv.check_integrity()


def test_truncate_releases_blocks_past_the_kept_tokens():
    kv = make_manager()
    kv.reserve("a", 10)  # 3 blocks
    kv.truncate("a", 5)  # keep 5 tokens -> 2 blocks
    assert (kv.num_blocks_held("a"), kv.table("a").num_tokens, kv.num_free_blocks) == (2, 5, 4)
    kv.check_integrity()
    kv.truncate("a", 7)  # longer than held: no-op
    assert kv.table("a").num_tokens == 5
    kv.truncate("a", 0)  # keep nothing
    assert (kv.num_blocks_held("a"), kv.num_free_blocks) == (0, 6)
    kv.check_integrity()
    kv.truncate("unknown", 3)  # unknown sequence: no-op
    kv.check_integrity()


def test_free_returns_everything_and_is_idempotent():
    kv = make_manager()
    kv.reserve("a", 9)
    kv.reserve("b", 4)
    kv.free("a")
    assert (kv.num_blocks_held("a"), kv.num_free_blocks) == (0, 5)
    kv.check_integrity()
    kv.free("a")  # second free: nothing to give back
    assert kv.num_free_blocks == 5
    kv.free("b")
    assert kv.num_used_blocks == 0
    kv.check_integrity()


def test_slot_ids_follow_the_block_table():
    kv = make_manager(num_blocks=4, block_size=4)
    kv.reserve("x", 4)  # takes block 0
    kv.reserve("a", 6)  # blocks 1, 2
    kv.free("x")  # block 0 goes to the back of the free list
    kv.reserve("a", 9)  # a's third block is 3
    ids = kv.table("a").block_ids
    assert ids == [1, 2, 3]
    assert kv.slot_ids("a", 0, 9) == [4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert kv.slot_ids("a", 3, 5) == [ids[0] * 4 + 3, ids[1] * 4 + 0]
    kv.check_integrity()


def test_check_integrity_catches_a_table_out_of_step_with_the_pool():
    kv = make_manager()
    kv.reserve("a", 4)
    kv.pool.share(kv.table("a").block_ids)  # a reference no table accounts for
    with pytest.raises(AssertionError, match="ref count != tables"):
        kv.check_integrity()


def test_config_rejects_bad_sizes_by_name():
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        KVPoolConfig(num_blocks=1, num_layers=1, num_kv_heads=1, head_dim=2, block_size=0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        KVPoolConfig(num_blocks=1, num_layers=1, num_kv_heads=1, head_dim=2, dtype="int8")


SEQS = ["a", "b", "c"]
operation = st.one_of(
    st.tuples(st.just("reserve"), st.sampled_from(SEQS), st.integers(0, 30)),
    st.tuples(st.just("truncate"), st.sampled_from(SEQS), st.integers(0, 30)),
    st.tuples(st.just("free"), st.sampled_from(SEQS), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(operation, max_size=40), block_size=st.sampled_from([1, 3, 4]))
def test_random_reserve_truncate_free_keeps_integrity_and_conserves_blocks(ops, block_size):
    kv = make_manager(num_blocks=8, block_size=block_size)
    for op, seq, n in ops:
        before = {s: (list(kv.table(s).block_ids), kv.table(s).num_tokens) for s in SEQS}
        if op == "reserve":
            if kv.can_reserve(seq, n):
                kv.reserve(seq, n)
                assert kv.table(seq).num_tokens == max(n, before[seq][1])
                assert kv.table(seq).block_ids[: len(before[seq][0])] == before[seq][0]  # grows at the end
            else:
                with pytest.raises(OutOfBlocks):
                    kv.reserve(seq, n)
                assert {s: (list(kv.table(s).block_ids), kv.table(s).num_tokens) for s in SEQS} == before
        elif op == "truncate":
            kv.truncate(seq, n)
            assert kv.table(seq).num_tokens == min(n, before[seq][1])
        else:
            kv.free(seq)
            assert kv.num_blocks_held(seq) == 0
        assert_conserved(kv, SEQS)
        # No two sequences ever share a slot of a reserved position.
        slots = [slot for s in SEQS if kv.table(s).num_tokens for slot in kv.slot_ids(s, 0, kv.table(s).num_tokens)]
        assert len(slots) == len(set(slots))
    for seq in SEQS:
        kv.free(seq)
    assert kv.num_free_blocks == kv.pool.num_blocks
    kv.check_integrity()
