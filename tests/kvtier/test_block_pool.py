import pytest

from kvtier import BlockPool, OutOfBlocks


def test_allocate_hands_out_distinct_blocks_and_release_returns_them():
    pool = BlockPool(4)
    first = pool.allocate(3)  # 3 held, 1 free
    assert len(set(first)) == 3 and all(pool.ref_count(b) == 1 for b in first)
    assert (pool.num_free, pool.num_used) == (1, 3)
    pool.check_integrity()
    pool.release(first[:2])  # 2 come back
    assert (pool.num_free, pool.num_used) == (3, 1)
    pool.check_integrity()
    again = pool.allocate(3)  # the 3 free ones, none of them still held
    assert first[2] not in again and len(set(again)) == 3
    assert pool.num_free == 0
    pool.check_integrity()


def test_allocate_more_than_free_raises_and_changes_nothing():
    pool = BlockPool(4)
    held = pool.allocate(3)
    assert pool.can_allocate(1) and not pool.can_allocate(2)
    with pytest.raises(OutOfBlocks, match="asked for 2 blocks, 1 free"):
        pool.allocate(2)
    assert pool.num_free == 1 and [pool.ref_count(b) for b in held] == [1, 1, 1]
    pool.check_integrity()
    assert len(pool.allocate(1)) == 1  # the one free block is still there


def test_allocate_zero_is_a_no_op():
    pool = BlockPool(2)
    assert pool.allocate(0) == [] and pool.num_free == 2
    pool.check_integrity()


def test_double_release_raises():
    pool = BlockPool(2)
    [block] = pool.allocate(1)
    pool.release([block])  # count 1 -> 0, back on the free list
    with pytest.raises(ValueError, match=f"block {block} released more often than held"):
        pool.release([block])
    assert pool.num_free == 2 and pool.ref_count(block) == 0
    pool.check_integrity()


def test_shared_block_is_freed_by_its_last_release_only():
    pool = BlockPool(3)
    [block] = pool.allocate(1)
    pool.share([block])  # two holders
    assert pool.ref_count(block) == 2
    pool.check_integrity()
    pool.release([block])  # one holder left: still held
    assert pool.ref_count(block) == 1 and pool.num_free == 2
    pool.check_integrity()
    pool.release([block])  # last holder: free
    assert pool.ref_count(block) == 0 and pool.num_free == 3
    pool.check_integrity()


def test_sharing_a_free_block_raises():
    pool = BlockPool(2)
    with pytest.raises(ValueError, match="block 1 is free and cannot be shared"):
        pool.share([1])
    assert pool.ref_count(1) == 0
    pool.check_integrity()


def test_check_integrity_catches_a_corrupted_free_list():
    pool = BlockPool(2)
    pool.allocate(1)
    pool._free.append(pool._free[0])  # the same block listed free twice
    with pytest.raises(AssertionError, match="free list twice"):
        pool.check_integrity()


def test_peak_used_is_the_high_water_mark():
    pool = BlockPool(8)
    first = pool.allocate(5)
    pool.release(first[:4])
    pool.allocate(2)
    assert (pool.num_used, pool.peak_used) == (3, 5)
    pool.allocate(4)
    assert pool.peak_used == 7
