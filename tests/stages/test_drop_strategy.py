"""Drop strategies on their own: what fits, what a committed chunk frees, which truncations are refused."""

import pytest

from kvtier import KVCacheManager, KVPoolConfig
from stages.config import WindowSpec
from stages.drop_strategy import KeepAll, SinksAndWindow, drop_strategy
from tests.stages.scheduler_harness import BLOCK, make_kv, thinker


def test_the_window_picks_the_strategy():
    assert isinstance(drop_strategy(None), KeepAll)
    window = WindowSpec(tokens=8, sinks=2)
    assert isinstance(drop_strategy(window), SinksAndWindow) and drop_strategy(window).window is window


def test_keep_all_needs_everything_known_to_fit_and_frees_nothing():
    kv, keep = make_kv(4), KeepAll()  # 16 tokens of KV
    fits, too_long = thinker("fits", 0.0, list(range(16)), max_tokens=None), thinker("long", 0.0, list(range(17)), 1)
    assert keep.never_fits(kv, fits, end=4) is None
    assert keep.never_fits(kv, too_long, end=4) == "needs 17 tokens of KV; the pool holds 16"  # whatever the chunk
    kv.reserve("fits", 16)
    fits.num_computed = 16
    keep.committed(kv, fits)
    keep.check_truncate(kv, fits, 1)
    assert kv.num_blocks_held("fits") == 4 and kv.dropped("fits") == range(0)


def test_sinks_and_window_frees_what_no_later_query_reads():
    kv, window = make_kv(16), SinksAndWindow(WindowSpec(tokens=6, sinks=2))
    request = thinker("r", 0.0, list(range(30)), max_tokens=None)
    kv.reserve("r", 30)
    request.num_computed = 30
    window.committed(kv, request)  # the next position (30) reads 0-1 and 24-30: blocks 1-5 go
    assert kv.dropped("r") == range(BLOCK, 6 * BLOCK) and kv.num_blocks_held("r") == 3
    window.committed(kv, request)  # nothing more to free
    assert kv.num_blocks_held("r") == 3
    kv.check_integrity()


def test_sinks_and_window_lets_the_request_forget_inputs_before_its_last_layers_x_window_positions():
    kv = KVCacheManager(KVPoolConfig(num_blocks=16, num_layers=3, num_kv_heads=1, head_dim=2, block_size=BLOCK))
    window = SinksAndWindow(WindowSpec(tokens=6, sinks=2))
    request = thinker("r", 0.0, list(range(100, 160)), max_tokens=None)
    kv.reserve("r", 20)
    request.num_computed = 20
    window.committed(kv, request)  # 20 - 3 x 6 = 2: inside the sink block, nothing to forget
    assert request.forgotten == range(0)
    kv.reserve("r", 60)
    request.num_computed = 60
    window.committed(kv, request)  # inputs from 60 - 18 = 42, block-aligned down: 40
    assert kv.dropped("r") == range(BLOCK, 52) and request.forgotten == range(BLOCK, 40)
    assert request.token_ids[:BLOCK] == [100, 101, 102, 103] and request.token_ids[40:42] == [140, 141]


def test_sinks_and_window_needs_only_what_it_holds_and_the_chunk_to_fit():
    kv, window = make_kv(4), SinksAndWindow(WindowSpec(tokens=4, sinks=0))
    request = thinker("r", 0.0, list(range(40)), max_tokens=None)  # 40 tokens, far more than the pool
    assert window.never_fits(kv, request, end=16) is None  # 4 blocks: all of the pool
    assert window.never_fits(kv, request, end=17) == "needs 5 blocks of KV for its window and chunk; the pool holds 4"
    kv.reserve("r", 16)
    request.num_computed = 16
    window.committed(kv, request)  # positions 0-11 freed: the request holds 1 block
    assert window.never_fits(kv, request, end=28) is None  # 1 held + 3 new


@pytest.mark.parametrize("keep, refused", [(5, True), (23, True), (29, True), (30, False), (3, False)])
def test_sinks_and_window_refuses_a_truncation_into_freed_kv(keep, refused):
    kv, window = make_kv(16), SinksAndWindow(WindowSpec(tokens=6, sinks=2))
    request = thinker("r", 0.0, list(range(30)), max_tokens=None)
    kv.reserve("r", 30)
    request.num_computed = 30
    window.committed(kv, request)  # positions 4-23 freed
    if refused:  # inside the freed KV, or a window that would reach into it
        with pytest.raises(ValueError, match="the window freed the KV of positions 4-23"):
            window.check_truncate(kv, request, keep)
    else:
        window.check_truncate(kv, request, keep)
    assert kv.dropped("r") == range(4, 24) and kv.table("r").num_tokens == 30  # a check changes nothing


def test_a_history_state_takes_blocks_with_the_first_chunk_and_is_not_recomputable():
    kv, plain, history = make_kv(4), SinksAndWindow(WindowSpec(tokens=4)), SinksAndWindow(WindowSpec(4, 0, "ssm"))
    request = thinker("r", 0.0, list(range(40)), max_tokens=None)
    assert plain.recomputable and plain.state_blocks(kv) == 0
    assert not history.recomputable and history.state_blocks(kv) == 2  # 16 state rows, 2 x 4 rows a block
    refused = history.never_fits(make_kv(2), request, end=1)
    assert refused == "needs 3 blocks of KV for its window and chunk; the pool holds 2"
    assert history.never_fits(make_kv(3), request, end=1) is None


@pytest.mark.parametrize("keep, refused", [(29, True), (16, True), (30, False), (31, False)])
def test_a_history_state_refuses_a_truncation_that_would_take_back_what_it_absorbed(keep, refused):
    kv, window = make_kv(16), SinksAndWindow(WindowSpec(tokens=6, sinks=2, history="ssm"))
    request = thinker("r", 0.0, list(range(32)), max_tokens=None)
    request.num_computed = 30  # absorbed positions 2-23
    if refused:
        with pytest.raises(ValueError, match="its history state absorbed positions 2-23"):
            window.check_truncate(kv, request, keep)
    else:
        window.check_truncate(kv, request, keep)
