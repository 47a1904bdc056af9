"""TokenHistory: a list by absolute position whose run after a kept head can be forgotten."""

import pytest

from stages.requests.token_history import TokenHistory


def history(n: int = 20) -> TokenHistory:
    return TokenHistory(range(100, 100 + n))


def test_without_forgetting_it_reads_like_a_list():
    ids = history()
    ids.append(7)
    ids.extend([8, 9])
    assert len(ids) == 23 and ids[2:5] == [102, 103, 104] and ids[-1] == 9 and ids[0] == 100
    assert list(ids) == [*range(100, 120), 7, 8, 9] and ids.forgotten == range(0)


def test_forgetting_keeps_the_head_and_the_tail_at_their_positions():
    ids = history()
    ids.forget(4, 12)
    assert ids.forgotten == range(4, 12) and len(ids) == 20
    assert ids[0:4] == [100, 101, 102, 103] and ids[12:15] == [112, 113, 114] and ids[19] == 119
    ids.forget(4, 16)  # the run grows from the same start
    ids.forget(4, 10)  # already forgotten: nothing
    assert ids.forgotten == range(4, 16) and ids[16:] == [116, 117, 118, 119]
    ids.append(5)
    assert len(ids) == 21 and ids[20] == 5


@pytest.mark.parametrize("read", [slice(3, 5), slice(11, 13), slice(0, 20), 4, 11])
def test_a_forgotten_position_cannot_be_read(read):
    ids = history()
    ids.forget(4, 12)
    with pytest.raises(IndexError, match="forgotten"):
        ids[read]
    with pytest.raises(IndexError):
        list(ids)


def test_forgetting_refuses_another_start_or_unknown_positions():
    ids = history()
    with pytest.raises(ValueError):
        ids.forget(4, 21)
    ids.forget(4, 8)
    with pytest.raises(ValueError, match="forgotten: 4-7"):
        ids.forget(2, 12)
    assert ids.forgotten == range(4, 8)


@pytest.mark.parametrize("keep, forgotten, tail", [(15, range(4, 12), [112, 113, 114]), (12, range(4, 12), []),
                                                   (4, range(0), []), (2, range(0), [])])
def test_truncating_keeps_the_forgotten_run_or_cuts_before_it(keep, forgotten, tail):
    ids = history()
    ids.forget(4, 12)
    ids.truncate(keep)
    assert len(ids) == keep and ids.forgotten == forgotten
    assert ids[12:keep] == tail and ids[0 : min(keep, 4)] == list(range(100, 100 + min(keep, 4)))


def test_truncating_into_the_forgotten_run_is_refused_and_changes_nothing():
    ids = history()
    ids.forget(4, 12)
    with pytest.raises(ValueError, match="positions 4-11 are forgotten"):
        ids.truncate(8)
    assert len(ids) == 20 and ids.forgotten == range(4, 12)


def test_a_run_from_position_zero_keeps_no_head():
    ids = history()
    ids.forget(0, 8)
    assert ids.forgotten == range(0, 8) and ids[8:10] == [108, 109]
