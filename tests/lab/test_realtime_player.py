"""RealtimePlayer on a fake clock: playback, underruns and stop, with hand-computed numbers."""

from __future__ import annotations

import pytest

from lab.client.player import RealtimePlayer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def player() -> RealtimePlayer:
    return RealtimePlayer(FakeClock())


def test_nothing_plays_before_the_first_chunk(player):
    assert (player.played_ms(5.0), player.buffered_ms(5.0), player.is_playing(5.0)) == (0.0, 0.0, False)
    assert player.started_at is None and player.drained_at is None


def test_known_arrival_pattern_gives_hand_computed_underruns(player):
    # 100 ms chunks arriving at 1.00, 1.05, 1.30, 1.45 and 1.50 s
    player.push(100, 1.00)  # plays 1.00-1.10; waiting for the first chunk is no underrun
    player.push(100, 1.05)  # queued behind: buffer runs out at 1.20
    assert player.buffered_ms(1.10) == pytest.approx(100)
    assert player.played_ms(1.25) == pytest.approx(200)  # dry since 1.20
    player.push(100, 1.30)  # dry 1.20 -> 1.30: underrun of 100 ms; plays 1.30-1.40
    assert player.played_ms(1.35) == pytest.approx(250)
    player.push(100, 1.45)  # dry 1.40 -> 1.45: underrun of 50 ms; plays 1.45-1.55
    player.push(100, 1.50)  # arrives while 50 ms is still buffered: no underrun; runs out at 1.65
    assert player.underruns == pytest.approx([100, 50])
    assert (player.num_underruns, player.max_underrun_ms) == (2, pytest.approx(100))
    assert player.underrun_ms_total == pytest.approx(150)
    assert player.total_ms == 500 and player.started_at == 1.00
    assert player.drained_at == pytest.approx(1.65)
    assert player.buffered_ms(1.60) == pytest.approx(50)
    assert player.played_ms(1.60) == pytest.approx(450)
    # silence after the last chunk is no underrun
    assert player.played_ms(9.0) == pytest.approx(500) and not player.is_playing(9.0)
    assert player.num_underruns == 2


def test_stop_freezes_playback_and_ignores_later_chunks(player):
    player.push(300, 0.0)
    assert player.stop(0.12) == pytest.approx(120)  # 120 ms heard, 180 ms discarded
    assert player.push(100, 0.5) is False
    assert player.played_ms(2.0) == pytest.approx(120) and player.buffered_ms(2.0) == 0.0
    assert player.stop(3.0) == pytest.approx(120)  # idempotent
    assert player.stopped_at == 0.12 and player.total_ms == 300


def test_now_defaults_to_the_injected_clock():
    clock = FakeClock()
    player = RealtimePlayer(clock)
    clock.now = 2.0
    player.push(80)
    clock.now = 2.05
    assert player.played_ms() == pytest.approx(50) and player.is_playing()


def test_negative_chunks_are_refused(player):
    with pytest.raises(ValueError, match=">= 0 ms"):
        player.push(-1, 0.0)
